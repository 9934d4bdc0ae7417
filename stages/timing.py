"""DVC stage: the training time of a study's main models measured as one (engine/interleaved.py): each model's
run from its start, in chunks of steps taken round-robin in one process; per round, every model's time over the
baseline's. Writes metrics/STUDY/timing_interleaved.json, which Table 2's time ratios come from.

    python stages/timing.py --study recursive [--chunk 10] [--rounds 8]
"""
import argparse
import os

import numpy as np

from itervision.config.params import load_params
from itervision.config.specs import read_model_spec, read_run_spec
from itervision.errors import ArgumentParser, UserError, cli_entry
from itervision.io import write_json
from itervision.layout import prepared_dir
from itervision.studies import STUDIES
from itervision.studies.common import interleaved_file

SKIP = 2  # rounds left out of the ratios: the first steps compile kernels and warm caches


@cli_entry
def main(argv=None):
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--study", required=True, choices=sorted(s for s, st in STUDIES.items() if st.interleaved))
    ap.add_argument("--chunk", type=int, default=10, help="steps of one model before the next takes over")
    ap.add_argument("--rounds", type=int, default=8, help="rounds: every model takes `chunk` steps in each")
    args = ap.parse_args(argv)
    if args.chunk < 1 or args.rounds <= SKIP + 1:
        raise UserError(f"--chunk must be >= 1 and --rounds > {SKIP + 1} (the first {SKIP} rounds warm up)")
    import torch

    from itervision.engine.interleaved import interleaved_seconds
    from itervision.stats import mean_ci

    p = load_params()
    s = p.study(args.study)
    ds = s.datasets[0]
    baseline = getattr(s, "baseline", s.main[0])
    members = {m: (read_model_spec(ds, m).config, read_run_spec(ds, m).train) for m in [baseline] + [
        m for m in s.main if m != baseline]}
    train = members[baseline][1]
    os.environ.update(train.cpu_pin_env())
    torch.set_num_threads(train.threads)
    seconds = interleaved_seconds(members, prepared_dir(ds), args.chunk, args.rounds)
    base = np.asarray(seconds[baseline][SKIP:])
    out = {"dataset": ds, "baseline": baseline, "chunk_steps": args.chunk, "rounds": args.rounds, "skipped": SKIP,
           "threads": train.threads, "seconds": seconds,
           "ratio": {m: {**mean_ci((np.asarray(v[SKIP:]) / base).tolist()),
                         "per_round": (np.asarray(v[SKIP:]) / base).tolist()} for m, v in seconds.items()
                     if m != baseline}}
    write_json(interleaved_file(args.study), out)
    print(f"{interleaved_file(args.study)}: " + ", ".join(
        f"{m} / {baseline} {r['mean']:.3f} ± {r['half_width']:.3f}" for m, r in out["ratio"].items()))


if __name__ == "__main__":
    main()
