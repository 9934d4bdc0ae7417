"""DVC stage: a study's models timed as one (engine/interleaved.py), rounds taken round-robin in one process; per
round, every model's time over the baseline's. Writes metrics/STUDY/timing_interleaved.json.

A training study (recursive: Table 2's time ratios): each main model's run from its start, in chunks of steps.
An inference study (SparseFormer: Table 4 and the latency frontier): every model's exits, a batch of
profile.timing_batch random images (throughput) and profile.latency_repeats single images (latency) each.

    python stages/timing.py --study recursive [--chunk 10] [--rounds 8]
    python stages/timing.py --study sparseformer [--rounds 8]
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
    ap.add_argument("--chunk", type=int, default=10, help="training: steps of one model before the next takes over")
    ap.add_argument("--rounds", type=int, default=8, help="rounds: every model takes `chunk` steps (training) or "
                                                          "runs each exit (inference) in each")
    args = ap.parse_args(argv)
    if args.chunk < 1 or args.rounds <= SKIP + 1:
        raise UserError(f"--chunk must be >= 1 and --rounds > {SKIP + 1} (the first {SKIP} rounds warm up)")
    import torch

    from itervision.engine.interleaved import interleaved_seconds
    from itervision.stats import mean_ci

    p = load_params()
    s = p.study(args.study)
    ds = s.datasets[0]
    if STUDIES[args.study].interleaved == "inference":
        return _inference(args, s, ds)
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


def _inference(args, s, ds):
    """Every model of the study on its first dataset (those configured there), exits timed round-robin; per
    (model, exit) the median over the rounds kept after warm-up, and the latency over the baseline's last exit
    (the study's target model) per round, mean ± 95 % t-interval."""
    import torch

    from itervision.config.specs import read_profile_spec
    from itervision.engine.interleaved import interleaved_inference
    from itervision.layout import resolved_dir
    from itervision.stats import mean_ci

    models = [m for m in dict.fromkeys([*s.main, *s.ablations]) if (resolved_dir(ds, m) / "model.json").exists()]
    baseline = s.target_model if s.target_model in models else models[0]
    specs = {m: read_model_spec(ds, m).config for m in models}
    train, prof = read_run_spec(ds, baseline).train, read_profile_spec(ds, baseline)
    os.environ.update(train.cpu_pin_env())
    torch.set_num_threads(train.threads)
    cfg = specs[baseline]
    timed = interleaved_inference(specs, (cfg.in_chans, cfg.img_size), prof.timing_batch, args.rounds,
                                  prof.latency_repeats)
    base = np.asarray([lat[-1] for lat in timed[baseline]["latency_ms"][SKIP:]])
    per_exit = {}
    for m, t in timed.items():
        lat, ips = np.asarray(t["latency_ms"][SKIP:]), np.asarray(t["images_per_s"][SKIP:])
        per_exit[m] = [{"exit": e + 1, "latency_ms": float(np.median(lat[:, e])),
                        "images_per_s": float(np.median(ips[:, e])),
                        "latency_ratio": {**mean_ci((lat[:, e] / base).tolist()),
                                          "per_round": (lat[:, e] / base).tolist()}}
                       for e in range(lat.shape[1])]
    out = {"kind": "inference", "dataset": ds, "baseline": baseline, "rounds": args.rounds, "skipped": SKIP,
           "threads": train.threads, "timing_batch": prof.timing_batch, "latency_repeats": prof.latency_repeats,
           "per_round": timed, "per_exit": per_exit}
    write_json(interleaved_file(args.study), out)
    print(f"{interleaved_file(args.study)}: latency over {baseline}'s: " + ", ".join(
        f"{m} exit {r['exit']} {r['latency_ratio']['mean']:.3f} ± {r['latency_ratio']['half_width']:.3f}"
        for m, rows in per_exit.items() for r in rows))


if __name__ == "__main__":
    main()
