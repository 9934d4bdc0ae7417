"""Regression gate: fail when a mean top-1 accuracy fell by more than its seed intervals allow (itervision/gate.py
states the rule). Not a DVC stage: CI and `make check-metrics REV=main` run it.

    python stages/check_regressions.py main                  # the workspace against git revision `main`
    python stages/check_regressions.py --diff-json d.json    # a saved `dvc metrics diff REV --all --json`
        [--params-diff-json p.json]                          # and `dvc params diff REV --all --json`

Exit status: 0 no regression, 1 regression, 2 usage or input error (bad revision, unreadable file, different
scales). dvc runs through this interpreter (`python -m dvc`), so PATH need not hold the venv.
"""
import argparse
import sys

from itervision.errors import UserError, cli_entry
from itervision.gate import check_scales, compare, dvc_json, format_rows
from itervision.io import read_json_file
from itervision.params import load_params


@cli_entry
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rev", nargs="?", help="git revision to compare the workspace with")
    ap.add_argument("--diff-json", help="read this `dvc metrics diff --all --json` output instead of running dvc")
    ap.add_argument("--params-diff-json", help="with --diff-json: a saved `dvc params diff --all --json`")
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args(argv)
    min_drop = load_params(args.params).report.regression_min_drop
    if args.diff_json:
        fix = "save it with `dvc metrics diff REV --all --json > FILE`"
        diff = read_json_file(args.diff_json, fix)
        scale = check_scales(read_json_file(args.params_diff_json, "save it with `dvc params diff REV --all --json`")
                             if args.params_diff_json else {})
    elif args.rev:
        scale = check_scales(dvc_json("params", "diff", args.rev, "--all"))
        diff = dvc_json("metrics", "diff", args.rev, "--all")
    else:
        raise UserError("give a git revision (e.g. main) or --diff-json FILE")
    rows = compare(diff, min_drop)
    for line in format_rows(rows):
        print(line)
    bad = [r for r in rows if r["verdict"].startswith("REGRESSION")]
    print(f"{len(rows)} accuracy metrics compared (scale {scale}), {len(bad)} regressions; a drop counts when it "
          f"exceeds both the combined 95% half-width of the two means and {100 * min_drop:.2f} points")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    try:
        main()
    except Exception as err:  # anything unforeseen is an input error (2), never a regression (1)
        print(f"error: {type(err).__name__}: {err}", file=sys.stderr)
        sys.exit(2)
