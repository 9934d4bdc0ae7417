"""reports/index.html: the reproduction as one self-contained page (stage report_html). Everything is inline (styles,
the per-claim charts as SVG, the figures as PNG data URIs); the only script opens every row before printing. The
page makes no network request, reads well on a phone-width screen, and prints.

A claim's row opens to show its per-seed values as dots, the mean and 95 % interval, the published value (a band
for a published range) and no effect, the tests with their Holm p and family, the indicators, and the table it
comes from. Links to every generated table are relative (local files)."""
from __future__ import annotations

import base64
import hashlib
import html
import json
import subprocess
from datetime import datetime, timezone
from pathlib import Path

REPORT = Path("reports/index.html")
CSS = """
body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 72rem; padding: 0.8rem; line-height: 1.4; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.25rem; margin-top: 2rem; } h3 { font-size: 1.05rem; }
table { border-collapse: collapse; font-size: 0.85rem; } td, th { border: 1px solid #ccc; padding: 0.2rem 0.4rem; }
.wrap { overflow-x: auto; }
details { border: 1px solid #ddd; border-radius: 4px; margin: 0.3rem 0; padding: 0.3rem 0.6rem; }
summary { cursor: pointer; } summary .verdict { font-weight: 600; }
.fid { font-size: 0.75rem; padding: 0 0.3rem; border-radius: 3px; background: #eef; margin-left: 0.3rem; }
.body dl { display: grid; grid-template-columns: minmax(7rem, max-content) 1fr; gap: 0.1rem 0.8rem; margin: 0.4rem 0; }
.body dt { color: #555; } .body dd { margin: 0; }
svg.seeds { width: 100%; max-width: 26rem; height: auto; }
figure { margin: 0.8rem 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
.figs { display: grid; grid-template-columns: repeat(auto-fill, minmax(18rem, 1fr)); gap: 0.8rem; }
.warn { background: #fff4d6; padding: 0.4rem 0.6rem; border-radius: 4px; }
@media print { details { break-inside: avoid; } .figs { display: block; } a { color: inherit; } }
"""
PRINT_OPEN = ("<script>window.addEventListener('beforeprint', () => "
              "document.querySelectorAll('details').forEach(d => { d.open = true; }));</script>")


def esc(v) -> str:
    return html.escape("" if v is None else str(v))


def git_state(root: Path) -> dict:
    """The commit the page was made at, and whether tracked files differed from it."""
    def git(*args):
        r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit or "unknown (not a git checkout)", "dirty": bool(dirty) if dirty is not None else None}


def lock_digest(root: Path) -> str:
    """sha256 over every dvc.lock (sorted paths and contents): names exactly which recorded outputs these are."""
    h = hashlib.sha256()
    for f in sorted(root.glob("**/dvc.lock")):
        if ".dvc" in f.parts or ".venv" in f.parts:
            continue
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def seeds_svg(plot: dict, width: int = 360, height: int = 58) -> str:
    """Per-seed values (dots), mean and 95 % interval (bar), published value or range (dashed line or band), no
    effect (grey line), on one axis."""
    vals = list(plot.get("per_seed") or [])
    mean, half, pub, null = plot.get("mean"), plot.get("half_width"), plot.get("published") or [], plot.get("null")
    xs = vals + pub + [null] + ([mean - half, mean + half] if mean is not None and half is not None else [])
    xs = [x for x in xs if x is not None]
    if not xs:
        return ""
    lo, hi = min(xs), max(xs)
    pad = (hi - lo) * 0.08 or 1.0
    lo, hi = lo - pad, hi + pad

    def x(v):
        return 10 + (width - 20) * (v - lo) / (hi - lo)

    parts = [f'<svg class="seeds" viewBox="0 0 {width} {height}" role="img" aria-label="per-seed values">']
    if null is not None:
        parts.append(f'<line x1="{x(null):.1f}" x2="{x(null):.1f}" y1="4" y2="{height - 14}" stroke="#999" />')
    if pub:
        a, b = x(min(pub)), x(max(pub))
        if b - a > 1:
            parts.append(f'<rect class="published" x="{a:.1f}" y="4" width="{b - a:.1f}" height="{height - 18}" '
                         f'fill="#d33" fill-opacity="0.15" />')
        for p in sorted(set(pub)):
            parts.append(f'<line class="published" x1="{x(p):.1f}" x2="{x(p):.1f}" y1="4" y2="{height - 14}" '
                         f'stroke="#d33" stroke-dasharray="4 3" />')
    if mean is not None and half is not None:
        parts.append(f'<line class="interval" x1="{x(mean - half):.1f}" x2="{x(mean + half):.1f}" y1="{height / 2:.1f}"'
                     f' y2="{height / 2:.1f}" stroke="#224" stroke-width="3" />')
    if mean is not None:
        parts.append(f'<rect class="mean" x="{x(mean) - 1.5:.1f}" y="{height / 2 - 8:.1f}" width="3" height="16" '
                     f'fill="#224" />')
    for i, v in enumerate(vals):
        dy = (i % 3 - 1) * 5
        parts.append(f'<circle class="seed" cx="{x(v):.1f}" cy="{height / 2 + dy - 12:.1f}" r="3.2" fill="#36c" />')
    parts.append(f'<text x="10" y="{height - 2}" font-size="10" fill="#555">{lo:.3g}</text>')
    parts.append(f'<text x="{width - 10}" y="{height - 2}" font-size="10" fill="#555" text-anchor="end">{hi:.3g}'
                 f' {esc(plot.get("unit", ""))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def row_html(row: dict, family: dict) -> str:
    t = family.get(row["test_id"], {})
    chart = seeds_svg(row["plot"]) if row.get("plot") else ""
    fields = [("claims", row["claim"]), ("reference", f"{row['reference']} ({row.get('source', '')})"),
              ("claimed setting", row["claimed_setting"]), ("tested setting", row["tested_setting"]),
              ("published", row["published"]), ("ours", row["estimate"]), ("per seed", row.get("per_seed", "")),
              ("tests", row["test"]), ("Holm p", "; ".join(x for x in (row["p_holm"], row["p_size_holm"]) if x)),
              ("family", t.get("family", "")), ("indicators", row["indicators"]), ("why", row["reason"]),
              ("seeds needed", row["seeds_needed_80pct"])]
    where = row.get("where")
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in fields if v)
    if where:
        dl += f'<dt>from</dt><dd><a href="../{esc(where)}">{esc(where)}</a></dd>'
    return (f'<details class="claim" data-test="{esc(row["test_id"])}"><summary>{esc(row["claim"])} '
            f'<span class="verdict">{esc(row["verdict"])}</span><span class="fid">{esc(row["fidelity"])}</span>'
            f'</summary><div class="body">{chart}<dl>{dl}</dl></div></details>')


def environments_html(aggregates: dict) -> str:
    cols = ["torch", "torchvision", "timm", "numpy", "cpu_model", "capability", "threads", "os", "gpu"]
    out = []
    for study, agg in aggregates.items():
        envs = agg.get("environments") or []
        warn = (f'<p class="warn">The runs of {esc(study)} come from {len(envs)} different environments.</p>'
                if len(envs) > 1 else "")
        rows = "".join("<tr>" + "".join(f"<td>{esc(e.get(c))}</td>" for c in cols) + f"<td>{len(e['runs'])}</td></tr>"
                       for e in envs)
        out.append(f"<h3>{esc(study)}</h3>{warn}<div class=\"wrap\"><table><tr>" + "".join(
            f"<th>{esc(c)}</th>" for c in cols + ["runs"]) + f"</tr>{rows}</table></div>")
    return "".join(out)


def figures_html(root: Path, studies: list[str]) -> str:
    out = []
    for study in studies:
        pngs = sorted((root / "plots" / study).glob("*.png"))
        if not pngs:
            continue
        figs = "".join(f'<figure><img alt="{esc(p.stem)}" src="data:image/png;base64,'
                       f'{base64.b64encode(p.read_bytes()).decode()}"><figcaption>{esc(p.stem)}</figcaption></figure>'
                       for p in pngs)
        out.append(f"<h3>{esc(study)}</h3><div class=\"figs\">{figs}</div>")
    return "".join(out)


def tables_html(root: Path, studies: list[str]) -> str:
    items = []
    for study in studies:
        for f in sorted((root / "metrics" / study / "tables").glob("*.md")):
            rel = f.relative_to(root)
            items.append(f'<li><a href="../{esc(rel)}">{esc(rel)}</a> (<a href="../{esc(rel.with_suffix(".csv"))}">'
                         f'csv</a>)</li>')
    return "<ul>" + "".join(items) + "</ul>"


def build(root: Path, scale: str, ledger: dict, counts: dict, aggregates: dict, now: datetime | None = None) -> str:
    """The whole page as a string (root: the repository, for figures, tables, git and the dvc.lock files)."""
    now = now or datetime.now(timezone.utc)
    state = git_state(root)
    head = (f"<p><b>Scale</b> {esc(scale)} · <b>commit</b> <code>{esc(state['commit'])}</code>"
            f"{' (with uncommitted changes)' if state['dirty'] else ''} · <b>dvc.lock digest</b> "
            f"<code>{lock_digest(root)}</code> · <b>made</b> {now:%Y-%m-%d %H:%M} UTC</p>")
    headline = "".join(
        f"<li><b>{esc(doc)}, {esc(fid)}</b>: {h['tests']} tests ({h['claims']} claims): "
        + ", ".join(f"{v} {esc(k)}" for k, v in h.items() if k not in ("tests", "claims")) + "</li>"
        for doc, classes in counts.items() for fid, h in classes.items())
    sections = []
    for doc, d in ledger["documents"].items():
        rows = "".join(row_html(r, d.get("family", {})) for r in d["entries"])
        sections.append(f"<h3>{esc(doc)}</h3>{rows}")
    studies = list(aggregates)
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>itervision reproduction report</title><style>{CSS}</style>{PRINT_OPEN}</head><body>"
            "<h1>itervision: reproduction report</h1>" + head
            + "<h2>Claims ledger</h2><p>One row per test (claims resting on one test together). Verdict words carry "
              "their scope: at the proxy they say nothing about the document's own setting. Open a row for its "
              "per-seed values (dots), mean and 95 % interval (bar), the published value (dashed; a band for a "
              "range) and no effect (grey).</p><ul>" + headline + "</ul>" + "".join(sections)
            + "<h2>Environments behind the runs</h2>" + environments_html(aggregates)
            + "<h2>Figures</h2>" + figures_html(root, studies)
            + "<h2>Every table</h2>" + tables_html(root, studies) + "</body></html>")
