"""The regression gate: does a change lower a mean top-1 accuracy by more than its seed intervals allow?

Rule, for every key `...top1.mean` of the gated metrics files (metrics/STUDY.json of every study; never the
timing files): with h_old and h_new the half-widths of the two 95% t-intervals over seeds (`...top1.ci95`), the
drop old - new is a regression when it exceeds both
    sqrt(h_old^2 + h_new^2)        (the half-width of an interval for the difference of two independent means)
    report.regression_min_drop      (a floor, for models whose seeds happen to agree closely).
A metric that disappears is a regression; a new one is reported, not judged; one whose combined interval is
wider than the accuracy scale (1, e.g. two seeds that disagree) is reported as uninformative, not compared.

The gate compares honestly or not at all. Exit status 0: compared, no regression; 1: a regression; 2: it
cannot compare honestly, and says why in one line: nothing compared (a baseline without metrics, only new or
uninformative keys, an empty or foreign diff file), a NaN or null accuracy, a negative interval, sides of different
scales, a workspace whose metrics are stale (`dvc status` lists changed stages) or corrupt.

Sides: against a git revision, the baseline is the revision's committed metrics files (`git show REV:FILE`, so
a key that is null there is told apart from one that is absent) and the new side the workspace's; or a saved
`dvc metrics diff REV --all --json`, checked for its shape.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys

from itervision.errors import UserError

MEAN, CI = "top1.mean", "top1.ci95"


class CannotCompare(UserError):
    """The gate cannot compare honestly (exit status 2)."""


def gated_files() -> list[str]:
    from itervision.layout import study_metrics
    from itervision.studies import STUDIES

    return [str(study_metrics(s)["summary"]) for s in STUDIES]


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


def _number(v, where: str):
    """A finite number, None for an absent value; NaN, infinities and non-numbers cannot be compared."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise CannotCompare(f"{where} is {v!r}, not a finite number; the gate cannot compare it (regenerate the "
                            f"metrics with `dvc repro`)")
    return float(v)


def _interval(v, where: str) -> float:
    """A 95% half-width in accuracy units: null (one seed) is 0; a negative one is corrupt."""
    h = _number(v, where)
    if h is None:
        return 0.0
    if h < 0:
        raise CannotCompare(f"{where} = {h} is not a half-width (negative); such an interval would allow any drop: "
                            f"regenerate the metrics with `dvc repro`")
    return h


def compare(old: dict, new: dict, min_drop: float) -> list[dict]:
    """Rows of every gated accuracy key of two sides ({file: flat metrics, or None when the file is absent}),
    regressions first. A key absent from the old side is new; a key absent from the new side is missing."""
    rows = []
    for file in sorted(set(old) | set(new)):
        o, n = old.get(file) or {}, new.get(file) or {}
        for key in sorted(k for k in set(o) | set(n) if k.endswith(MEAN)):
            base = key[: -len(MEAN)]
            where_old, where_new = f"{file}:{key} (baseline)", f"{file}:{key} (new)"
            if key in o and o[key] is None:
                raise CannotCompare(f"{where_old} is null: the baseline has no accuracy to compare with (NaN when it "
                                    f"was written); compare with a revision whose metrics are complete")
            old_v = _number(o.get(key), where_old)
            new_v = _number(n.get(key), where_new) if key in n else None
            if key in n and new_v is None:
                raise CannotCompare(f"{where_new} is null (NaN when it was written); fix the runs, then `dvc repro`")
            allowed = max(min_drop, math.hypot(_interval(o.get(base + CI), where_old.replace(MEAN, CI)),
                                               _interval(n.get(base + CI), where_new.replace(MEAN, CI))))
            if old_v is not None and new_v is None:
                raise CannotCompare(f"{file}:{key} is in the baseline but missing here: the comparison would be partial"
                                    f"; regenerate the metrics (`dvc repro`) or save the whole diff (`--all`)")
            if old_v is None:
                verdict = "new"
            elif allowed >= 1:  # the intervals allow any drop of an accuracy: this key compares nothing
                verdict = "uninformative"
            elif old_v - new_v > allowed:
                verdict = "REGRESSION"
            else:
                verdict = "ok"
            rows.append({"file": file, "key": key, "old": old_v, "new": new_v, "allowed": allowed, "verdict": verdict})
    return sorted(rows, key=lambda r: (not r["verdict"].startswith("REGRESSION"), r["file"], r["key"]))


def expected_keys(p) -> dict:
    """{gated file: [mean top-1 keys]} that params say exist: every main model of every study on each of its
    datasets (config.params.Params)."""
    from itervision.layout import study_metrics

    return {str(study_metrics(name)["summary"]): [f"{ds}.{m}.{MEAN}" for ds in s.datasets for m in s.main]
            for name, s in p.studies.items()}


def require_keys(side: dict, expected: dict, which: str) -> None:
    """Every expected key on one side, else exit 2 naming the first missing one (a partial diff or metrics file
    must not pass as a comparison)."""
    for file, keys in expected.items():
        if not side.get(file):
            raise CannotCompare(f"the {which} side has no {file}: the comparison would leave out a whole study; save "
                                f"the whole diff (`dvc metrics diff REV --all --json`) or regenerate the metrics")
        missing = [k for k in keys if k not in side[file]]
        if missing:
            raise CannotCompare(f"the {which} side lacks {file}:{missing[0]} ({len(missing)} gated keys missing); "
                                f"save the whole diff (`--all`) or regenerate the metrics")


def sides_from_diff(diff) -> tuple[dict, dict]:
    """(old, new) sides from a saved `dvc metrics diff --all --json`. DVC writes null for a key a side lacks,
    so a null baseline reads as a new key here (comparing against a revision tells the two apart)."""
    if not isinstance(diff, dict) or not all(isinstance(v, dict) for v in diff.values()):
        raise CannotCompare("the diff file is not `dvc metrics diff REV --all --json` output (a JSON object of files, "
                            "each of keys); save one with that command")
    files = [f for f in diff if any(f.endswith(g) for g in gated_files())]
    if not files:
        raise CannotCompare(f"the diff file holds none of the gated metrics files ({', '.join(gated_files())}); save "
                            f"it with `dvc metrics diff REV --all --json` (not `dvc metrics show`)")
    old, new = {}, {}
    for f in files:
        for key, v in diff[f].items():
            if not isinstance(v, dict) or not ({"old", "new"} & set(v)):
                raise CannotCompare(f"{f}:{key} in the diff file has no old/new values; it is not "
                                    f"`dvc metrics diff --all --json` output")
            if v.get("old") is not None:
                old.setdefault(f, {})[key] = v["old"]
            if v.get("new") is not None:
                new.setdefault(f, {})[key] = v["new"]
    return old, new


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], capture_output=True, text=True)


def side_at(rev: str) -> dict:
    """{file: flat metrics} of the gated files committed at `rev`; every file must be there."""
    if _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").returncode != 0:
        raise CannotCompare(f"git revision '{rev}' does not exist here; fetch it or name another")
    out = {}
    for f in gated_files():
        r = _git("show", f"{rev}:{f}")
        if r.returncode != 0:
            raise CannotCompare(f"revision {rev} has no {f} (it predates the metrics or the study): nothing to "
                                f"compare with; compare with a revision that has them")
        try:
            out[f] = flatten(json.loads(r.stdout))
        except json.JSONDecodeError:
            raise CannotCompare(f"{f} at {rev} is not valid JSON; compare with another revision") from None
    return out


def workspace_side() -> dict:
    from pathlib import Path

    out = {}
    for f in gated_files():
        try:
            out[f] = flatten(json.loads(Path(f).read_text()))
        except FileNotFoundError:
            raise CannotCompare(f"the workspace has no {f}; run `dvc repro` first") from None
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            raise CannotCompare(f"the workspace's {f} is corrupt (not a JSON object of metrics); regenerate it with "
                                f"`dvc repro --force` on its aggregate stage") from None
    return out


def stale_stages() -> list[str]:
    """Stages `dvc status` lists as changed: the workspace metrics are not what the code and params produce."""
    r = subprocess.run([sys.executable, "-m", "dvc", "status", "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise CannotCompare(f"`dvc status` failed ({last}); the workspace's state is unknown")
    try:
        return sorted(json.loads(r.stdout or "{}"))
    except json.JSONDecodeError:
        raise CannotCompare("`dvc status --json` printed no JSON; is this a DVC repository?") from None


def scale_at(rev: str | None) -> str:
    """params.yaml's `scale` at a revision (None: the workspace)."""
    import yaml

    if rev is None:
        from pathlib import Path

        text = Path("params.yaml").read_text()
    else:
        r = _git("show", f"{rev}:params.yaml")
        if r.returncode != 0:
            raise CannotCompare(f"revision {rev} has no params.yaml; compare with a revision of this pipeline")
        text = r.stdout
    data = yaml.safe_load(text)
    return str(data.get("scale", "unknown")) if isinstance(data, dict) else "unknown"


def check_scales(old: str, new: str) -> str:
    if old != new:
        raise CannotCompare(f"the two sides come from different scales ({old} vs {new}); compare results of the "
                            f"same scale")
    return new


def compared(rows: list[dict]) -> list[dict]:
    """The rows that really compare two accuracies (not new, not wider than the accuracy scale)."""
    return [r for r in rows if r["verdict"] not in ("new", "uninformative")]


def verdict_of(rows: list[dict]) -> int:
    """0 pass, 1 regression; nothing compared cannot pass."""
    if not compared(rows):
        raise CannotCompare(f"nothing to compare: {len(rows)} accuracy metrics, none both in the baseline and here "
                            f"with an interval narrower than the accuracy scale")
    return 1 if any(r["verdict"].startswith("REGRESSION") for r in rows) else 0


def format_rows(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        old = "—" if r["old"] is None else f"{100 * r['old']:.2f}"
        new = "missing" if r["new"] is None else f"{100 * r['new']:.2f}"
        change = "" if r["old"] is None or r["new"] is None else f" ({100 * (r['new'] - r['old']):+.2f})"
        out.append(f"{r['verdict']:20s} {r['file']}:{r['key']}  {old} -> {new}{change}  "
                   f"[allowed drop {100 * r['allowed']:.2f}]")
    return out
