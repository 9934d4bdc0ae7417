"""DVC stage: statistics over seeds for one study, from the run records and profiles alone.

    metrics/STUDY/aggregate.json   everything the report stage renders
    metrics/STUDY.json             summary metrics for `dvc metrics` (accuracies, intervals, costs: gated)
    metrics/STUDY_timing.json      wall-clock figures (shown by `dvc metrics`, never gated)

Reads exactly the runs that params (seeds, ablation_seeds, the study's lists) say exist, never a glob, and
names every missing or corrupt run at once.
"""
import argparse
from pathlib import Path

from itervision.analysis import recursive, sparseformer
from itervision.errors import cli_entry
from itervision.io import finite_or_none, write_json
from itervision.params import load_params

STUDIES = {"recursive": recursive, "sparseformer": sparseformer}


@cli_entry
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--study", required=True, choices=sorted(STUDIES))
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args(argv)
    p = load_params(args.params)
    module = STUDIES[args.study]
    agg = {"scale": p.scale, **module.aggregate(p)}
    write_json(Path("metrics") / args.study / "aggregate.json", agg)
    write_json(Path("metrics") / f"{args.study}.json", finite_or_none(module.summary_metrics(agg)))
    write_json(Path("metrics") / f"{args.study}_timing.json", finite_or_none(module.timing_metrics(agg)))


if __name__ == "__main__":
    main()
