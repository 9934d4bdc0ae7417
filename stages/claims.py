"""DVC stage: the claims ledger of both documents, metrics/claims.md and metrics/claims.csv (headline counts in
metrics/claims.json; entries and each document's Holm family in metrics/ledger.json, which the report stages
print from; the forest plot of every tested row in plots/forest.png), from every study's aggregate.json, the paper
configurations' costs and the reference CSVs (itervision/claims/ and docs/ledger.md state the tests, the
multiple-comparison rule and the verdicts)."""
from itervision.errors import ArgumentParser, cli_entry
from itervision.io import read_json_file
from itervision.layout import LEDGER, reference_csv, study_metrics
from itervision.claims.judge import assess
from itervision.claims.render import write
from itervision.reporting.tables import load_reference
from itervision.studies import STUDIES


@cli_entry
def main(argv=None):
    ArgumentParser(description=__doc__).parse_args(argv)
    paper = read_json_file(LEDGER["paper_costs"], "regenerate it with `dvc repro paper_costs`")
    claims, aggregates, checks = [], {}, {}
    for name, study in STUDIES.items():
        if not study.has_part("claims"):
            continue
        agg = read_json_file(study_metrics(name)["aggregate"], f"regenerate it with `dvc repro aggregate_{name}`",
                             required=("seeds",))
        part = study.part("claims")
        claims += part.claims(agg, paper, load_reference(reference_csv(name)))
        aggregates[name], checks[name] = agg, part.checks(agg)
    entries, family = assess(claims, aggregates, checks)
    write(entries, family, LEDGER["md"], LEDGER["csv"], LEDGER["counts"], LEDGER["ledger"], LEDGER["forest"])


if __name__ == "__main__":
    main()
