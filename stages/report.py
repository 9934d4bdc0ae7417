"""DVC stage: tables (Markdown + CSV under metrics/STUDY/tables/) and figures (plots/STUDY/) of one study, from
metrics/STUDY/aggregate.json (itervision/studies/STUDY/tables.py and figures.py); every p-value printed is the
claims ledger's Holm-adjusted one for that test (metrics/ledger.json), so one test prints one adjusted p."""

from itervision.errors import ArgumentParser, cli_entry
from itervision.io import read_json_file
from itervision.layout import LEDGER, study_metrics
from itervision.claims.judge import apply_family
from itervision.reporting.tables import environment_table
from itervision.studies import STUDIES


@cli_entry
def main(argv=None):
    ap = ArgumentParser(description=__doc__)
    ap.add_argument("--study", required=True, choices=sorted(STUDIES))
    args = ap.parse_args(argv)
    study, files = STUDIES[args.study], study_metrics(args.study)
    agg = read_json_file(files["aggregate"], f"regenerate it with `dvc repro --force aggregate_{args.study}`",
                         required=("seeds",))
    if study.has_part("claims"):
        ledger = read_json_file(LEDGER["ledger"], "regenerate it with `dvc repro claims`", required=("documents",))
        doc = ledger["documents"].get(args.study, {})
        agg = apply_family(agg, doc.get("family", {}))
        agg["ledger"] = doc.get("entries", [])
    study.part("tables").write_tables(agg, files["tables"])
    environment_table(agg, files["tables"])
    study.part("figures").write_figures(agg, files["plots"])


if __name__ == "__main__":
    main()
