"""Regression gate: fail when a mean top-1 accuracy fell by more than report.regression_tolerance.

    python stages/check_regressions.py main            # compares the workspace with git revision `main`
    python stages/check_regressions.py --diff-json d.json   # a saved `dvc metrics diff REV --json`
`dvc metrics diff` has no threshold and always exits 0, so this reads its JSON and decides.
Exit status: 0 no regression, 1 regression, 2 usage or input error.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from itervision.errors import UserError, cli_entry  # noqa: E402
from itervision.params import get, load_params  # noqa: E402


def find_regressions(diff: dict, tolerance: float, suffix: str = "top1.mean") -> tuple[list, list]:
    """(checked, regressions): rows (file, key, old, new, change) of every accuracy key in a metrics diff."""
    checked, bad = [], []
    for file, keys in diff.items():
        for key, v in keys.items():
            if not key.endswith(suffix):
                continue
            old, new = v.get("old"), v.get("new")
            if old is None:  # a new metric: nothing to compare with
                continue
            change = None if new is None else new - old
            row = (file, key, old, new, change)
            checked.append(row)
            if new is None or change < -tolerance:
                bad.append(row)
    return checked, bad


@cli_entry
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rev", nargs="?", help="git revision to compare the workspace with")
    ap.add_argument("--diff-json", help="read this `dvc metrics diff --json` output instead of running dvc")
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args(argv)
    tolerance = float(get(load_params(args.params), "report.regression_tolerance", (int, float)))
    if args.diff_json:
        diff = json.loads(Path(args.diff_json).read_text())
    elif args.rev:
        r = subprocess.run(["dvc", "metrics", "diff", args.rev, "--json"], capture_output=True, text=True)
        if r.returncode != 0:
            raise UserError(f"`dvc metrics diff {args.rev} --json` failed: {r.stderr.strip().splitlines()[-1:]}")
        diff = json.loads(r.stdout or "{}")
    else:
        raise UserError("give a git revision (e.g. main) or --diff-json FILE")
    checked, bad = find_regressions(diff, tolerance)
    for file, key, old, new, change in checked:
        flag = "REGRESSION" if (file, key, old, new, change) in bad else "ok"
        shown = "missing" if new is None else f"{new:.4f} ({change:+.4f})"
        print(f"{flag:10s} {file}:{key}  {old:.4f} -> {shown}")
    print(f"{len(checked)} accuracy metrics checked, {len(bad)} fell by more than {tolerance}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
