"""DVC stage: tables (Markdown + CSV under metrics/STUDY/tables/) and figures (plots/STUDY/) of one study,
from metrics/STUDY/aggregate.json alone."""
import argparse
from pathlib import Path

from itervision.errors import cli_entry
from itervision.io import read_json_file
from itervision.reporting import figures, recursive, sparseformer

STUDIES = {"recursive": (recursive.write_tables, figures.recursive_figures),
           "sparseformer": (sparseformer.write_tables, figures.sparseformer_figures)}


@cli_entry
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--study", required=True, choices=sorted(STUDIES))
    args = ap.parse_args(argv)
    agg = read_json_file(Path("metrics") / args.study / "aggregate.json",
                         f"regenerate it with `dvc repro --force aggregate_{args.study}`", required=("seeds",))
    tables, plots = STUDIES[args.study]
    tables(agg, Path("metrics") / args.study / "tables")
    plots(agg, Path("plots") / args.study)


if __name__ == "__main__":
    main()
