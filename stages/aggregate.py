"""DVC stage: statistics over seeds for one study -> metrics/<study>/aggregate.json and metrics/<study>.json.

Reads exactly the runs that params (seeds, ablation_seeds, the study's lists) say exist, never a glob.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from itervision.errors import cli_entry  # noqa: E402
from itervision.io import finite_or_none, write_json  # noqa: E402
from itervision.params import load_params  # noqa: E402
from itervision.reporting import recursive, sparseformer  # noqa: E402

STUDIES = {"recursive": recursive, "sparseformer": sparseformer}


@cli_entry
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--study", required=True, choices=sorted(STUDIES))
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args(argv)
    module = STUDIES[args.study]
    agg = module.aggregate(load_params(args.params))
    write_json(Path("metrics") / args.study / "aggregate.json", agg)
    write_json(Path("metrics") / f"{args.study}.json", finite_or_none(module.summary_metrics(agg)))


if __name__ == "__main__":
    main()
