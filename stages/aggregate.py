"""DVC stage: statistics over seeds for one study, from the run records and profiles alone.

    metrics/STUDY/aggregate.json   everything the report stage renders
    metrics/STUDY.json             summary metrics for `dvc metrics` (accuracies, intervals, costs: gated)
    metrics/STUDY_timing.json      wall-clock figures (shown by `dvc metrics`, never gated)

Reads exactly the runs that params (seeds, ablation_seeds, the study's lists) say exist, never a glob, and
names every missing or corrupt run at once. The study's statistics are in itervision/studies/STUDY/analysis.py.
"""
import argparse

from itervision.errors import ArgumentParser, cli_entry
from itervision.io import finite_or_none, write_json
from itervision.layout import study_metrics
from itervision.config.params import load_params
from itervision.studies import STUDIES


@cli_entry
def main(argv=None):
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--study", required=True, choices=sorted(STUDIES))
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args(argv)
    p = load_params(args.params)
    analysis = STUDIES[args.study].part("analysis")
    files = study_metrics(args.study)
    agg = {"scale": p.scale, **analysis.aggregate(p)}
    settle = {tid: d for tid, d in p.settle_claims.items() if d.get("study") == args.study}
    if settle:  # the sequential designs of the claims make settle added seeds to (the ledger applies them)
        agg["settle"] = settle
    write_json(files["aggregate"], agg)
    write_json(files["summary"], finite_or_none(analysis.summary_metrics(agg)))
    write_json(files["timing"], finite_or_none(analysis.timing_metrics(agg)))


if __name__ == "__main__":
    main()
