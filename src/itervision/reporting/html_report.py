"""reports/index.html: the reproduction as one self-contained page (stage report_html). Everything is inline (styles,
the per-claim charts as SVG, the figures as PNG data URIs, every generated table); one small script filters the
rows, opens a figure full size on a click, and opens every row before printing. The page makes no network
request, fits a phone-width screen (412 px) without sideways scrolling, and prints.

It opens with its findings (what held, reversed or missed the published size; what the proxy does not exercise),
then the forest plot of every tested row and the ledger with a legend of verdict colours and a filter (hide the
rows not testable at this scale; one fidelity class). A row names its claim ID (what `make settle CLAIM=` takes)
and opens to show its per-seed values as dots, the mean and 95 % interval, the published value (a band for a
published range) and no effect, the tests with their Holm p and family, the indicators, and a link to the table it
comes from, inside the page. The header names the commit whose code produced the results and whether the code
differed from it (outputs written by the pipeline run itself do not count)."""
from __future__ import annotations

import base64
import hashlib
import html
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
summary, dd, li, td, figcaption { overflow-wrap: anywhere; }
code { font-size: 0.8rem; background: #f4f4f4; padding: 0 0.2rem; }
.verdict { padding: 0 0.35rem; border-radius: 3px; margin-left: 0.3rem; white-space: normal; }
.g-decided-holds { background: #c9f0dd; } .g-decided-reversed { background: #f8cfc0; }
.g-decided-size { background: #fde3b8; } .g-not_exercised { background: #e2e2e2; }
.g-inconclusive { background: #cfe3f7; } .g-accounting { background: #e6dcf3; } .g-untestable { background: #f3f3f3;
  color: #555; } .g-none { background: #f3f3f3; }
.legend span { display: inline-block; margin: 0.1rem 0.3rem 0.1rem 0; }
.filter { margin: 0.6rem 0; display: flex; flex-wrap: wrap; gap: 0.4rem 1rem; align-items: center; }
.findings li { margin: 0.2rem 0; }
.figs figure img { cursor: zoom-in; } .figs figure.full { grid-column: 1 / -1; }
.figs figure.full img { cursor: zoom-out; width: 100%; }
@media print { details { break-inside: avoid; } .figs { display: block; } a { color: inherit; }
  .filter { display: none; } }
"""
# The page's one script: the filter, full-size figures, rows opened for printing; the state can come from the URL
# fragment (#hide-untestable, #fidelity-proxy, #open-figure-N) so a filtered view is a link. It records the page's
# laid-out width on <html> (data-scroll-width, data-view-width): the phone-width check reads it.
SCRIPT = """<script>
function ivFilter() {
  const hide = document.getElementById('hide-untestable').checked;
  const fid = document.getElementById('fidelity').value;
  document.querySelectorAll('details.claim').forEach(d => {
    d.hidden = (hide && d.dataset.group === 'untestable') || (fid !== 'all' && d.dataset.fidelity !== fid);
  });
}
window.addEventListener('DOMContentLoaded', () => {
  const h = location.hash;
  if (h.includes('hide-untestable')) document.getElementById('hide-untestable').checked = true;
  const f = h.match(/fidelity-([a-z]+)/); if (f) document.getElementById('fidelity').value = f[1];
  document.getElementById('hide-untestable').addEventListener('change', ivFilter);
  document.getElementById('fidelity').addEventListener('change', ivFilter);
  ivFilter();
  document.querySelectorAll('.figs figure').forEach(fig => {
    const toggle = () => fig.classList.toggle('full');
    fig.querySelector('img').addEventListener('click', toggle);
    fig.querySelector('img').addEventListener('keydown', e => { if (e.key === 'Enter') toggle(); });
  });
  const o = h.match(/open-figure-(\\d+)/);
  if (o) { const fig = document.getElementById('figure-' + o[1]); if (fig) fig.classList.add('full'); }
  const root = document.documentElement;
  root.dataset.scrollWidth = root.scrollWidth; root.dataset.viewWidth = window.innerWidth;
});
window.addEventListener('beforeprint', () => document.querySelectorAll('details').forEach(d => { d.open = true; }));
</script>"""
VERDICT_CLASS = {"decided": {"holds": "g-decided-holds", "reversed": "g-decided-reversed"}}
LEGEND = (("g-decided-holds", "holds / reproduced"), ("g-decided-reversed", "reversed / contradicted"),
          ("g-decided-size", "smaller or larger than published"), ("g-not_exercised", "not exercised at the proxy"),
          ("g-inconclusive", "inconclusive"), ("g-accounting", "accounting (counts)"),
          ("g-untestable", "not testable at this scale"))


def esc(v) -> str:
    return html.escape("" if v is None else str(v))


# What the pipeline run itself writes: a difference there is the run's output, not different code
OUTPUTS = ("metrics/", "plots/", "reports/", "configs/resolved/", "runs/", "data/prepared/", "dvc_plots/")


def git_state(root: Path) -> dict:
    """The commit whose code produced the results, and the tracked files other than the pipeline's own outputs
    (OUTPUTS, dvc.lock) that differ from it: the page is written in the middle of `dvc repro`, when the outputs
    already written differ from the commit while the code does not."""
    def git(*args):
        r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    changed = git("status", "--porcelain", "--untracked-files=no")
    code = [] if changed is None else [
        line[3:] for line in changed.splitlines()
        if not line[3:].startswith(OUTPUTS) and not line[3:].endswith("dvc.lock")]
    return {"commit": commit or "unknown (not a git checkout)", "dirty": bool(code) if changed is not None else None,
            "changed": code}


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


def group_class(row: dict) -> str:
    """The colour class of a row, from the group the claims stage gave it (ledger.json) and its outcome."""
    group = row.get("group") or "inconclusive"
    if group == "decided":
        outcome, verdict = row.get("outcome") or "", str(row.get("verdict", ""))
        if outcome.startswith("holds") or verdict.startswith(("holds", "reproduced")):
            return "g-decided-holds"
        return "g-decided-reversed" if "reversed" in (outcome + verdict) else "g-decided-size"
    return f"g-{group}"


def findings_html(ledger: dict) -> str:
    """The findings block of claims.md (ledger.json `findings`, written by the claims stage), first on the page."""
    items = ledger.get("findings") or []

    def bold(text):  # the block's only markup is **...** around a verdict
        parts = esc(text.replace("\\|", "|")).split("**")
        return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))

    return '<ul class="findings">' + "".join(f"<li>{bold(x)}</li>" for x in items) + "</ul>"


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
        dl += f'<dt>from</dt><dd><a href="#{table_anchor(where)}">{esc(where)}</a></dd>'
    return (f'<details class="claim" data-test="{esc(row["test_id"])}" data-group="{esc(row.get("group", ""))}" '
            f'data-fidelity="{esc(row["fidelity"])}"><summary>{esc(row["claim"])} '
            f'<span class="verdict {group_class(row)}">{esc(row["verdict"])}</span><span class="fid">'
            f'{esc(row["fidelity"])}</span> <code>{esc(row["test_id"])}</code></summary><div class="body">{chart}'
            f'<dl>{dl}</dl></div></details>')


def table_anchor(path: str) -> str:
    """The in-page id of a generated table (its .md path or stem)."""
    return "table-" + "".join(c if c.isalnum() else "-" for c in Path(path).with_suffix("").as_posix())


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
        figs = "".join(f'<figure id="figure-{next(_FIGURES)}"><img alt="{esc(p.stem)}" tabindex="0" role="button" '
                       'title="click: full size" src="data:image/png;base64,'
                       f'{base64.b64encode(p.read_bytes()).decode()}'
                       f'"><figcaption>{esc(p.stem)} (click to open full size)</figcaption></figure>' for p in pngs)
        out.append(f"<h3>{esc(study)}</h3><div class=\"figs\">{figs}</div>")
    return "".join(out)


def forest_html(root: Path, ledger: dict) -> str:
    """The forest plot of every tested row (plots/forest.png, written by the claims stage), inline."""
    path = (ledger.get("forest") or {}).get("path")
    if not path or not (root / path).exists():
        return ""
    return ('<figure><img alt="forest plot of every tested claim" src="data:image/png;base64,'
            f'{base64.b64encode((root / path).read_bytes()).decode()}"><figcaption>Every tested claim: estimate and '
            "95 % interval against the published value (plots/forest.png)</figcaption></figure>")


def tables_html(root: Path, studies: list[str]) -> str:
    """Every generated table inside the page (from its CSV), each folded under its name, with the relative links to
    the .md and .csv files beside it."""
    import csv

    items = []
    for study in studies:
        for f in sorted((root / "metrics" / study / "tables").glob("*.md")):
            rel = f.relative_to(root)
            data = f.with_suffix(".csv")
            body = ""
            if data.exists():
                with open(data, newline="") as fh:
                    rows = list(csv.reader(fh))
                if rows:
                    body = ('<div class="wrap"><table><tr>' + "".join(f"<th>{esc(c)}</th>" for c in rows[0]) + "</tr>"
                            + "".join("<tr>" + "".join(f"<td>{esc(c.removeprefix(chr(39)))}</td>" for c in r)
                                      + "</tr>" for r in rows[1:]) + "</table></div>")
            items.append(f'<details id="{table_anchor(str(rel))}"><summary>{esc(rel)}</summary>{body}<p>'
                         f'<a href="../{esc(rel)}">{esc(rel.name)}</a> · <a href="../{esc(rel.with_suffix(".csv"))}">'
                         f'csv</a></p></details>')
    return "".join(items)


def build(root: Path, scale: str, ledger: dict, counts: dict, aggregates: dict, now: datetime | None = None) -> str:
    """The whole page as a string (root: the repository, for figures, tables, git and the dvc.lock files)."""
    global _FIGURES
    import itertools

    _FIGURES = itertools.count(1)
    now = now or datetime.now(timezone.utc)
    state = git_state(root)
    code = ("" if not state["dirty"] else f" with uncommitted changes to {len(state['changed'])} code file"
            f"{'s' if len(state['changed']) != 1 else ''} ({esc(', '.join(state['changed'][:5]))}"
            f"{', ...' if len(state['changed']) > 5 else ''})")
    head = (f"<p><b>Scale</b> {esc(scale)} · <b>code</b> of commit <code>{esc(state['commit'])}</code>{code} · "
            f"<b>dvc.lock digest</b> <code>{lock_digest(root)}</code> · <b>made</b> {now:%Y-%m-%d %H:%M} UTC</p>")
    headline = "".join(
        f"<li><b>{esc(doc)}, {esc(fid)}</b>: {h['tests']} tests ({h['claims']} claims): "
        + ", ".join(f"{v} {esc(k)}" for k, v in h.items() if k not in ("tests", "claims")) + "</li>"
        for doc, classes in counts.items() for fid, h in classes.items())
    sections = []
    for doc, d in ledger["documents"].items():
        rows = "".join(row_html(r, d.get("family", {})) for r in d["entries"])
        sections.append(f"<h3>{esc(doc)}</h3>{rows}")
    studies = list(aggregates)
    fidelities = sorted({e["fidelity"] for d in ledger["documents"].values() for e in d["entries"]})
    legend = '<p class="legend">' + "".join(f'<span class="verdict {c}">{esc(t)}</span>' for c, t in LEGEND) + "</p>"
    controls = ('<div class="filter"><label><input type="checkbox" id="hide-untestable"> hide the rows not testable '
                'at this scale</label><label>fidelity <select id="fidelity"><option value="all">all</option>'
                + "".join(f'<option value="{esc(f)}">{esc(f)}</option>' for f in fidelities)
                + "</select></label></div>")
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>itervision reproduction report</title><style>{CSS}</style>{SCRIPT}</head><body>"
            "<h1>itervision: reproduction report</h1>" + head
            + "<h2>Findings</h2>" + findings_html(ledger) + forest_html(root, ledger)
            + "<h2>Claims ledger</h2><p>One row per test (claims resting on one test together), coloured by what its "
              "verdict says; the code after the verdict is the claim ID (<code>make settle CLAIM=...</code>). "
              "Verdict words carry their scope: at the proxy they say nothing about the document's own setting. "
              "Open a row for its per-seed values (dots), mean and 95 % interval (bar), the published value (dashed; "
              "a band for a range) and no effect (grey).</p>" + legend + controls + "<ul>" + headline + "</ul>"
            + "".join(sections)
            + "<h2>Environments behind the runs</h2>" + environments_html(aggregates)
            + "<h2 id=\"figures\">Figures</h2>" + figures_html(root, studies)
            + "<h2>Every table</h2>" + tables_html(root, studies) + "</body></html>")


_FIGURES = None
