"""DVC stage: tables (Markdown + CSV under metrics/<study>/tables/) and figures (plots/<study>/) of one study,
from metrics/<study>/aggregate.json alone."""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from itervision.errors import UserError, cli_entry  # noqa: E402
from itervision.io import read_json  # noqa: E402
from itervision.reporting import figures, recursive, sparseformer  # noqa: E402

STUDIES = {"recursive": (recursive.write_tables, figures.recursive_figures),
           "sparseformer": (sparseformer.write_tables, figures.sparseformer_figures)}


@cli_entry
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--study", required=True, choices=sorted(STUDIES))
    args = ap.parse_args(argv)
    path = Path("metrics") / args.study / "aggregate.json"
    if not path.exists():
        raise UserError(f"{path} not found; run the aggregate stage first (dvc repro aggregate_{args.study})")
    agg = read_json(path)
    tables, plots = STUDIES[args.study]
    tables(agg, Path("metrics") / args.study / "tables")
    plots(agg, Path("plots") / args.study)


if __name__ == "__main__":
    main()
