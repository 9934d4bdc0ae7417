"""Shared plotting helpers of the studies' figures (PNG) and their data (CSV; the files under plots/*/dvc/ are what
`dvc plots show` draws).

Accuracies are in percent everywhere; every interval band is clipped to [0, 100]. The CSVs for DVC are long
tables (one row per model and x value, with low/high for the band and a `kind` column: curve, point or
published) drawn by the templates in .dvc/plots/.
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

from itervision.io import atomic_path, write_text  # noqa: E402
from itervision.reporting.tables import naming  # noqa: E402

PUBLISHED = dict(marker="D", facecolors="none", edgecolors="grey", s=36, zorder=3)


def band(stat) -> tuple[float, float, float]:
    """(mean, low, high) in percent, the interval clipped to [0, 100]; no interval -> low = high = mean."""
    m, h = stat["mean"], stat.get("half_width", float("nan"))
    h = 0.0 if not math.isfinite(h) else h
    m = m * 100
    return m, max(0.0, m - h * 100), min(100.0, m + h * 100)


def write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    import csv
    import io

    from itervision.reporting.escape import csv_cell

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([csv_cell(h) for h in header])
    w.writerows([[f"{v:.6g}" if isinstance(v, float) else csv_cell(str(v)) for v in r] for r in rows])
    write_text(path, buf.getvalue())


def save(fig, path: Path) -> None:
    with naming(path), atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def curve(ax, x, stats, label, **kw):
    rows = [band(s) for s in stats]
    line, = ax.plot(x, [r[0] for r in rows], label=label, **kw)
    ax.fill_between(x, [r[1] for r in rows], [r[2] for r in rows], alpha=0.18, color=line.get_color(), lw=0)
    return rows


def learning_curves(curves: dict, out_png: Path, out_csv: Path, title: str) -> None:
    """Test top-1 of the last exit against training images seen, one line and band per model."""
    rows = []
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for m, c in curves.items():
        if not c["images"]:
            continue
        for split, style in (("test", "-"), ("calib", ":")):
            r = curve(ax, c["images"], c[split], f"{m}" if split == "test" else None, ls=style, marker=".",
                       **({} if split == "test" else {"color": ax.lines[-1].get_color(), "alpha": 0.6}))
            rows += [[m, split, x, *v, "curve"] for x, v in zip(c["images"], r)]
    ax.set(xlabel="training images seen", ylabel="top-1 of the last exit (%)", title=title)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v / 1000:.0f}k"))
    ax.legend(fontsize=7, title="solid: test, dotted: calib", title_fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1.0))
    save(fig, out_png)
    write_csv(out_csv, ["model", "split", "images", "top1", "low", "high", "kind"], rows)


def abs_band(stat) -> tuple[float, float]:
    h = stat.get("half_width", float("nan"))
    h = 0.0 if not math.isfinite(h) else h
    return max(0.0, stat["mean"] - h), min(1.0, stat["mean"] + h)


def log_ticks(ax, xs) -> None:
    """A log x axis with ticks at the given values (the static models' costs), labelled plainly."""
    ax.set_xscale("log")
    kept = []
    for x in sorted(set(xs)):
        if not kept or math.log(x / kept[-1]) > 0.15:  # no two labels on top of each other
            kept.append(x)
    ax.set_xticks(kept)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="x", labelsize=7)


def label_points(ax, points: list[tuple[float, float, str]]) -> None:
    """Labels beside static points, nudged apart vertically where they would overlap."""
    placed = []
    for x, y, text in sorted(points):
        dy = 6
        for px, py in placed:
            if abs(math.log(x) - math.log(px)) < 0.25 and abs(y - py) < 1.5:
                dy += 9
        placed.append((x, y))
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(5, dy), fontsize=7)
