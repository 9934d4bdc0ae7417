"""DVC stage: tables (Markdown + CSV under metrics/STUDY/tables/) and figures (plots/STUDY/) of one study, from
metrics/STUDY/aggregate.json alone (itervision/studies/STUDY/tables.py and figures.py)."""

from itervision.errors import ArgumentParser, cli_entry
from itervision.io import read_json_file
from itervision.layout import study_metrics
from itervision.studies import STUDIES


@cli_entry
def main(argv=None):
    ap = ArgumentParser(description=__doc__)
    ap.add_argument("--study", required=True, choices=sorted(STUDIES))
    args = ap.parse_args(argv)
    study, files = STUDIES[args.study], study_metrics(args.study)
    agg = read_json_file(files["aggregate"], f"regenerate it with `dvc repro --force aggregate_{args.study}`",
                         required=("seeds",))
    study.part("tables").write_tables(agg, files["tables"])
    study.part("figures").write_figures(agg, files["plots"])


if __name__ == "__main__":
    main()
