"""Formatting and writing tables (Markdown + CSV side by side), and the published reference numbers."""
from __future__ import annotations

import contextlib
import csv
import io
import math
from pathlib import Path

from itervision.reporting.escape import csv_cell, md_cell
from itervision.io import write_text


def fmt_ci(stat: dict | None, scale: float = 100.0, digits: int = 2) -> str:
    """'mean ± half-width (n)'; one seed gives 'mean (n=1)'."""
    if not stat or stat.get("n", 0) == 0 or not math.isfinite(stat["mean"]):
        return "—"
    mean = stat["mean"] * scale
    hw = stat.get("half_width", float("nan"))
    if not math.isfinite(hw):
        return f"{mean:.{digits}f} (n={stat['n']})"
    return f"{mean:.{digits}f} ± {hw * scale:.{digits}f} ({stat['n']})"


def fmt_boot(diff: dict | None, scale: float = 100.0, digits: int = 2) -> str:
    """'[low, high]; P(A>B) p [low, high]': the bootstrap interval of a paired difference and the probability of
    improvement with its stratified bootstrap interval (stats/resampling.py); '' without them."""
    b = (diff or {}).get("bootstrap") or {}
    low, high = b.get("diff_low"), b.get("diff_high")
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return ""
    text = f"[{low * scale:.{digits}f}, {high * scale:.{digits}f}]"
    poi = b.get("p_improvement")
    if poi is not None and math.isfinite(poi):
        pl, ph = b.get("p_improvement_low"), b.get("p_improvement_high")
        text += f"; P(A>B) {poi:.2f}" + (f" [{pl:.2f}, {ph:.2f}]" if pl is not None and math.isfinite(pl) else "")
    return text


def fmt_p(p) -> str:
    if p is None:
        return "—"
    if not math.isfinite(p):
        return "n/a"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def fmt_num(v, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) >= 1000):
        return f"{int(v):,}"
    return f"{v:.{digits}f}"


def fmt_params(n) -> str:
    return "—" if n is None else f"{n / 1e6:.3f}M" if n >= 1e5 else f"{n / 1e3:.1f}k"


@contextlib.contextmanager
def naming(path):
    """An OS error without a file name (a full disk met inside a write) re-raised with `path`, so the one-line
    error names the file."""
    try:
        yield
    except OSError as err:
        if err.filename is None:
            raise OSError(err.errno, err.strerror or type(err).__name__, str(path)) from None
        raise


def write_table(stem: Path, title: str, columns: list[str], rows: list[list], notes: list[str] = ()) -> None:
    """stem.md (title, table, notes) and stem.csv (the same cells)."""
    stem = Path(stem)
    md = [f"## {title}", "", "| " + " | ".join(md_cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    md += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    if notes:
        md += [""] + [f"- {n}" for n in notes]
    with naming(stem.with_suffix(".md")):
        write_text(stem.with_suffix(".md"), "\n".join(md) + "\n")
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([csv_cell(c) for c in columns])
    w.writerows([[csv_cell(c) for c in row] for row in rows])
    with naming(stem.with_suffix(".csv")):
        write_text(stem.with_suffix(".csv"), buf.getvalue())


def budget_note(budgets: dict, models: list) -> str:
    """'Each run saw N training images (...)', naming the models whose budget differs."""
    groups = {}
    for m in models:
        b = budgets[m]
        groups.setdefault((b["images_seen"], b["epochs"], b["steps_per_epoch"], b["global_batch"],
                           b["train_images"]), []).append(m)
    parts = []
    for (seen, epochs, steps, batch, train), ms in groups.items():
        who = "every run" if len(groups) == 1 else ", ".join(ms)
        parts.append(f"{who}: {seen:,} training images seen ({epochs} epoch{'s' if epochs > 1 else ''} of {steps} "
                     f"steps of {batch} images, drawn from a training split of {train:,})")
    return "Training budget: " + "; ".join(parts) + "."


def environment_table(agg: dict, out_dir: Path) -> None:
    """environments.md|csv: the software and machines behind a study's runs; several rows mean its tables mix
    environments (results then differ by more than seed noise can explain only where the stacks differ)."""
    envs = agg.get("environments") or []
    cols = ["torch", "torchvision", "timm", "numpy", "cpu_model", "capability", "threads", "os", "gpu"]
    rows = [[e.get(c) if e.get(c) is not None else "—" for c in cols] + [len(e["runs"])] for e in envs]
    notes = ["One row per distinct environment, from each run's config.json (recorded, not part of the run "
             "fingerprint)."]
    if len(envs) > 1:
        notes.insert(0, f"**The runs of this study come from {len(envs)} different environments**: the tables mix "
                        "them; `dvc repro --force` on one machine makes them one.")
    write_table(Path(out_dir) / "environments", "Environments behind the runs", cols + ["runs"], rows, notes)


REFERENCE_COLUMNS = ("dataset", "row", "quantity", "value", "source")


class Reference(dict):
    """Published numbers by (dataset, row, quantity); a row the code reads and the file lacks is one line."""

    def __init__(self, path: Path, values: dict):
        super().__init__(values)
        self.path = path

    def __missing__(self, key):
        from itervision.errors import UserError

        raise UserError(f"{self.path} has no row {'/'.join(key)}, which the claims ledger and tables read; restore "
                        f"it from git")


def load_reference(path: Path) -> dict:
    """{(dataset, row, quantity): value} of a document's published numbers (data/reference/STUDY.csv), checked:
    the columns REFERENCE_COLUMNS, a finite number in every value, no (dataset, row, quantity) twice. A failure
    is one line naming the file and line."""
    import math

    from itervision.errors import UserError

    path = Path(path)
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in REFERENCE_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise UserError(f"{path} lacks the column(s) {', '.join(missing)} (needs "
                                f"{', '.join(REFERENCE_COLUMNS)})")
            out, lines = {}, {}
            for r in reader:
                where = f"{path}:{reader.line_num}"
                key = (r["dataset"], r["row"], r["quantity"])
                if not all(key):
                    raise UserError(f"{where}: empty dataset, row or quantity")
                try:
                    value = float(r["value"])
                except (TypeError, ValueError):
                    raise UserError(f"{where}: value {r['value']!r} is not a number") from None
                if not math.isfinite(value):
                    raise UserError(f"{where}: value {r['value']} is not a finite number")
                if key in out:
                    raise UserError(f"{where}: {'/'.join(key)} is already given on line {lines[key]}; keep one")
                out[key], lines[key] = value, reader.line_num
    except FileNotFoundError:
        raise UserError(f"{path} is missing; it holds the document's published numbers (restore it from git)") from None
    if not out:
        raise UserError(f"{path} holds no published numbers; restore it from git")
    return Reference(path, out)
