"""DVC stage: the claims ledger of both documents, metrics/claims.md and metrics/claims.csv (verdict counts in
metrics/claims.json), from every study's aggregate.json, the paper configurations' costs and the reference CSVs
(itervision/ledger.py states the test, the multiple-comparison rule and the verdicts)."""
from pathlib import Path

from itervision.errors import ArgumentParser, cli_entry
from itervision.io import read_json_file
from itervision.ledger import assess, gather, write

PAPER_COSTS = Path("metrics/paper_costs.json")


@cli_entry
def main(argv=None):
    ArgumentParser(description=__doc__).parse_args(argv)
    paper = read_json_file(PAPER_COSTS, "regenerate it with `dvc repro paper_costs`")
    claims = assess(gather(Path("metrics"), paper))
    write(claims, Path("metrics/claims.md"), Path("metrics/claims.csv"), Path("metrics/claims.json"))


if __name__ == "__main__":
    main()
