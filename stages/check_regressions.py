"""Regression gate: fail when a mean top-1 accuracy fell by more than its seed intervals allow (itervision/pipeline/gate.py
states the rule). Not a DVC stage: CI and `make check-metrics REV=main` run it.

    python stages/check_regressions.py main                  # the workspace against git revision `main`
    python stages/check_regressions.py --diff-json d.json    # a saved `dvc metrics diff REV --all --json`
        [--params-diff-json p.json]                          # and `dvc params diff REV --all --json`

Exit status: 0 compared, no regression; 1 regression; 2 cannot compare honestly (nothing compared, a baseline
without metrics, NaN, a negative interval, different scales, a stale or corrupt workspace, a bad revision or
file), with one line saying which. dvc runs through this interpreter, so PATH need not hold the venv.
"""
import argparse
import sys

from itervision.errors import ArgumentParser, UserError, cli_entry
from itervision.pipeline.gate import (check_scales, compare, compared, expected_keys, format_rows, require_keys,
                                      scale_at, side_at, sides_from_diff, stale_stages, verdict_of, workspace_side)
from itervision.io import read_json_file
from itervision.config.params import load_params


@cli_entry
def main(argv=None):
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rev", nargs="?", help="git revision to compare the workspace with")
    ap.add_argument("--diff-json", help="read this `dvc metrics diff --all --json` output instead of the workspace")
    ap.add_argument("--params-diff-json", help="with --diff-json: a saved `dvc params diff --all --json`")
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args(argv)
    p = load_params(args.params)
    min_drop = p.report.regression_min_drop
    if args.diff_json:
        fix = "save it with `dvc metrics diff REV --all --json > FILE`"
        old, new = sides_from_diff(read_json_file(args.diff_json, fix))
        scale = "unknown"
        if args.params_diff_json:
            pdiff = read_json_file(args.params_diff_json, "save it with `dvc params diff REV --all --json`")
            v = next((keys["scale"] for keys in pdiff.values() if isinstance(keys, dict) and
                      isinstance(keys.get("scale"), dict)), {})
            scale = check_scales(str(v.get("old", v.get("new"))), str(v.get("new", v.get("old"))))
    elif args.rev:
        scale = check_scales(scale_at(args.rev), scale_at(None))
        stale = stale_stages()
        if stale:
            raise UserError(f"the workspace metrics are stale: `dvc status` lists {len(stale)} changed stages (first "
                            f"{stale[0]}); run `dvc repro` (make repro) before gating")
        old, new = side_at(args.rev), workspace_side()
    else:
        raise UserError("give a git revision (e.g. main) or --diff-json FILE")
    rows = compare(old, new, min_drop)  # values first: NaN, negative intervals, a key gone from the new side
    status = verdict_of(rows)
    require_keys(new, expected_keys(p), "new")  # then completeness: a partial comparison cannot pass
    if args.diff_json:  # a saved diff must hold the whole baseline too (a revision's metrics are read whole)
        require_keys(old, expected_keys(p), "baseline")
    for line in format_rows(rows):
        print(line)
    bad = [r for r in rows if r["verdict"].startswith("REGRESSION")]
    n = len(compared(rows))
    print(f"{n} accuracy metrics compared, {len(rows) - n} new or uninformative (scale {scale}), {len(bad)} "
          f"regressions; a "
          f"drop counts when it exceeds both the combined 95% half-width of the two means and {100 * min_drop:.2f} "
          f"points")
    sys.exit(status)


if __name__ == "__main__":
    try:
        main()
    except Exception as err:  # anything unforeseen is an input error (2), never a regression (1)
        print(f"error: {type(err).__name__}: {err}", file=sys.stderr)
        sys.exit(2)
