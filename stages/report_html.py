"""DVC stage: reports/index.html, the reproduction as one self-contained page (no network request): scale, commit,
dvc.lock digest, date and the environments behind the runs; the claims ledger, each row opening to its per-seed
values, interval, published value, tests and source table; every figure inline; links to every table
(itervision/reporting/html_report.py)."""
from pathlib import Path

from itervision.config.params import load_params
from itervision.errors import ArgumentParser, cli_entry
from itervision.io import read_json_file, write_text
from itervision.layout import LEDGER, study_metrics
from itervision.reporting.html_report import REPORT, build
from itervision.studies import STUDIES


@cli_entry
def main(argv=None):
    ap = ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=str(REPORT))
    args = ap.parse_args(argv)
    root = Path(".")
    ledger = read_json_file(LEDGER["ledger"], "regenerate it with `dvc repro claims`", required=("documents",))
    counts = read_json_file(LEDGER["counts"], "regenerate it with `dvc repro claims`")
    aggregates = {name: read_json_file(study_metrics(name)["aggregate"], f"regenerate it with `dvc repro "
                                       f"aggregate_{name}`") for name in STUDIES}
    page = build(root, load_params().scale, ledger, counts, aggregates)
    write_text(args.out, page)
    rows = sum(len(d["entries"]) for d in ledger["documents"].values())
    print(f"{args.out}: {len(page.encode()) / 1e6:.1f} MB, {rows} ledger rows, no network request")


if __name__ == "__main__":
    main()
