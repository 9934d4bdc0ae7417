"""The regression gate: does a change lower a mean top-1 accuracy by more than its seed intervals allow?

Rule, for every key `...top1.mean` of the gated metrics files (metrics/recursive.json, metrics/sparseformer.json;
never the timing files): with h_old and h_new the half-widths of the two 95% t-intervals over seeds
(`...top1.ci95`), the drop old - new is a regression when it exceeds both
    sqrt(h_old^2 + h_new^2)        (the half-width of an interval for the difference of two independent means)
    report.regression_min_drop      (a floor, for models whose seeds happen to agree closely).
A result that differs only by floating point from another machine (0.0-0.4 points here) stays far inside the
intervals (2-9 points at CPU scale); a drop the intervals call real is flagged. A metric that disappears is a
regression; a new one is reported, not judged. Both sides must come from the same scale.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys

from itervision.errors import UserError

GATED_FILES = ("metrics/recursive.json", "metrics/sparseformer.json")
MEAN, CI = "top1.mean", "top1.ci95"


def dvc_json(*args: str) -> dict:
    """`dvc ARGS --json` through the running interpreter (no reliance on PATH)."""
    cmd = [sys.executable, "-m", "dvc", *args, "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"`dvc {' '.join(args)}` failed: {last}")
    try:
        return json.loads(r.stdout or "{}")
    except json.JSONDecodeError:
        raise UserError(f"`dvc {' '.join(args)} --json` printed no JSON; is this a DVC repository?") from None


def _num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def compare(diff: dict, min_drop: float) -> list[dict]:
    """Rows of every gated accuracy key in a `dvc metrics diff --all --json`, regressions first."""
    if not isinstance(diff, dict):
        raise UserError("the metrics diff must be a JSON object of files, as `dvc metrics diff --json` prints")
    rows = []
    for file, keys in diff.items():
        if not any(file.endswith(g) for g in GATED_FILES) or not isinstance(keys, dict):
            continue
        for key, v in keys.items():
            if not key.endswith(MEAN) or not isinstance(v, dict):
                continue
            old, new = _num(v.get("old")), _num(v.get("new"))
            ci = keys.get(key[: -len(MEAN)] + CI, {}) if isinstance(keys.get(key[: -len(MEAN)] + CI), dict) else {}
            h_old, h_new = _num(ci.get("old")) or 0.0, _num(ci.get("new")) or 0.0
            allowed = max(min_drop, math.hypot(h_old, h_new))
            if old is None:
                verdict = "new"
            elif new is None:
                verdict = "REGRESSION (missing)"
            elif old - new > allowed:
                verdict = "REGRESSION"
            else:
                verdict = "ok"
            rows.append({"file": file, "key": key, "old": old, "new": new, "allowed": allowed, "verdict": verdict})
    return sorted(rows, key=lambda r: (not r["verdict"].startswith("REGRESSION"), r["file"], r["key"]))


def check_scales(params_diff: dict) -> str:
    """The scale both sides were produced at; an error when they differ."""
    for file, keys in (params_diff or {}).items():
        v = (keys or {}).get("scale")
        if isinstance(v, dict) and "old" in v and v.get("old") != v.get("new"):
            raise UserError(f"the two sides come from different scales ({v.get('old')} vs {v.get('new')} in {file}); "
                            f"compare results of the same scale")
        if isinstance(v, dict):
            return str(v.get("new", v.get("old")))
    return "unknown"


def format_rows(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        old = "—" if r["old"] is None else f"{100 * r['old']:.2f}"
        new = "missing" if r["new"] is None else f"{100 * r['new']:.2f}"
        change = "" if r["old"] is None or r["new"] is None else f" ({100 * (r['new'] - r['old']):+.2f})"
        out.append(f"{r['verdict']:20s} {r['file']}:{r['key']}  {old} -> {new}{change}  "
                   f"[allowed drop {100 * r['allowed']:.2f}]")
    return out
