"""Figures (PNG) and their data (CSV; the files under plots/*/dvc/ are what `dvc plots show` draws).

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
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter  # noqa: E402

from itervision.io import atomic_path, write_text  # noqa: E402
from itervision.reporting.tables import load_reference  # noqa: E402

SF_REFERENCE = Path("data/reference/sparseformer.csv")
REC_REFERENCE = Path("data/reference/recursive.csv")
PUBLISHED = dict(marker="D", facecolors="none", edgecolors="grey", s=36, zorder=3)


def band(stat) -> tuple[float, float, float]:
    """(mean, low, high) in percent, the interval clipped to [0, 100]; no interval -> low = high = mean."""
    m, h = stat["mean"], stat.get("half_width", float("nan"))
    h = 0.0 if not math.isfinite(h) else h
    m = m * 100
    return m, max(0.0, m - h * 100), min(100.0, m + h * 100)


def write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    def cell(v):
        return f"{v:.6g}" if isinstance(v, float) else str(v)
    write_text(path, ",".join(header) + "\n" + "".join(",".join(cell(v) for v in r) + "\n" for r in rows))


def save(fig, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def _curve(ax, x, stats, label, **kw):
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
            r = _curve(ax, c["images"], c[split], f"{m}" if split == "test" else None, ls=style, marker=".",
                       **({} if split == "test" else {"color": ax.lines[-1].get_color(), "alpha": 0.6}))
            rows += [[m, split, x, *v, "curve"] for x, v in zip(c["images"], r)]
    ax.set(xlabel="training images seen", ylabel="top-1 of the last exit (%)", title=title)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v / 1000:.0f}k"))
    ax.legend(fontsize=7, title="solid: test, dotted: calib", title_fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1.0))
    save(fig, out_png)
    write_csv(out_csv, ["model", "split", "images", "top1", "low", "high", "kind"], rows)


# ------------------------------------------------------------------------------------ recursive study

def recursive_figures(agg: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    ref = load_reference(REC_REFERENCE)
    ds0 = agg["datasets"][0]

    # accuracy at every step, every variant
    rows = []
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for m, ps in agg["per_step"].items():
        steps = list(range(1, len(ps["top1"]) + 1))
        r = _curve(ax, steps, ps["top1"], m, marker="o", ms=3, ls="-" if m in agg["accuracy"][ds0] else "--")
        rows += [[m, s, *v, "curve"] for s, v in zip(steps, r)]
    pub = ref.get((ds0, agg["reference"], "top1"))
    if pub:
        ax.axhline(pub, color="grey", ls=":", lw=1)
        ax.annotate(f"published {agg['reference']} ({ds0}, 16 steps, 1 seed): {pub:.1f}%", (1, pub),
                    xytext=(2, -10), textcoords="offset points", fontsize=7, color="grey")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="recursion step (exit)", ylabel="test top-1 (%)", title=f"Accuracy at every step ({ds0})")
    ax.legend(fontsize=7, title="solid: main, dashed: ablations", title_fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1.0))
    save(fig, out / "accuracy_per_step.png")
    write_csv(out / "dvc" / "accuracy_per_step.csv", ["model", "step", "top1", "low", "high", "kind"], rows)

    # sparsity budget
    rows = [[r["topk"], r["avg_sparsity_formula"], *band(r["top1"])] for r in agg["k_ablation"]]
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    ax.errorbar([r[1] for r in rows], [r[2] for r in rows], yerr=[[r[2] - r[3] for r in rows],
                                                                   [r[4] - r[2] for r in rows]], fmt="o-", capsize=3)
    for r in rows:
        ax.annotate(f"k={r[0]}", (r[1], r[2]), textcoords="offset points", xytext=(5, 5), fontsize=8)
    for k, label in (("k=6", "published k=6"), ("k=2", "published k=2")):
        s = ref.get(("all", k, "avg_sparsity"))
        if s is not None:
            ax.axvline(s, color="grey", ls=":", lw=1)
            ax.annotate(f"{label}: {s:.0%}", (s, 0.02), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                        color="grey", xytext=(-9, 0), textcoords="offset points")
    ax.margins(x=0.15, y=0.2)
    ax.set(xlabel="average attention sparsity (formula)", ylabel="test top-1 (%)",
           title=f"Sparsity budget ({agg['ablation_dataset']}, n = {len(agg['ablation_seeds'])})")
    save(fig, out / "sparsity_accuracy.png")
    write_csv(out / "dvc" / "sparsity_accuracy.csv", ["k", "sparsity", "top1", "low", "high", "kind"],
              [r + ["curve"] for r in rows])

    # expert utilisation heat map
    util = agg["traces"]["expert_utilisation"]
    if util:
        write_csv(out / "expert_utilisation.csv", ["step", "expert", "share"],
                  [[t + 1, e + 1, u] for t, row in enumerate(util) for e, u in enumerate(row)])
        fig, ax = plt.subplots(figsize=(5.2, 3.2))
        im = ax.imshow([list(r) for r in zip(*util)], aspect="auto", cmap="viridis",
                       extent=(0.5, len(util) + 0.5, len(util[0]) + 0.5, 0.5))
        fig.colorbar(im, ax=ax, label="share of routed tokens")
        ax.set_xticks(range(1, len(util) + 1))
        ax.set_yticks(range(1, len(util[0]) + 1))
        ax.set(xlabel="recursion step", ylabel="expert", title=f"Expert utilisation ({agg['traces']['model']})")
        save(fig, out / "expert_utilisation.png")
    rm = agg["traces"]["role_mass"]
    write_csv(out / "role_mass.csv", ["step", "role", "mass", "low", "high"],
              [[i + 1, role, s["mean"], *_abs_band(s)] for role, series in rm.items()
               for i, s in enumerate(series)])

    learning_curves(agg["curves"], out / "learning_curves.png", out / "dvc" / "learning_curves.csv",
                    f"Learning curves ({ds0})")


def _abs_band(stat) -> tuple[float, float]:
    h = stat.get("half_width", float("nan"))
    h = 0.0 if not math.isfinite(h) else h
    return max(0.0, stat["mean"] - h), min(1.0, stat["mean"] + h)


# ------------------------------------------------------------------------------------ SparseFormer study

def _published_frontier(ref: dict, dataset: str) -> tuple[str | None, dict]:
    """Published (GFLOPs, top-1) points: the same dataset's, else the ImageNet subset that has the most."""
    for ds in (dataset, "imagenet100", "imagenet200"):
        pts = {}
        for (d, row, q), v in ref.items():
            if d == ds and q == "gflops" and (d, row, "top1") in ref:
                pts[row] = (v, ref[(d, row, "top1")])
        if pts:
            return ds, pts
    return None, {}


def _log_ticks(ax, xs) -> None:
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


def _label_points(ax, points: list[tuple[float, float, str]]) -> None:
    """Labels beside static points, nudged apart vertically where they would overlap."""
    placed = []
    for x, y, text in sorted(points):
        dy = 6
        for px, py in placed:
            if abs(math.log(x) - math.log(px)) < 0.25 and abs(y - py) < 1.5:
                dy += 9
        placed.append((x, y))
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(5, dy), fontsize=7)


def sparseformer_figures(agg: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    ref = load_reference(SF_REFERENCE)
    for ds, d in agg["datasets"].items():
        pub_ds, pub = _published_frontier(ref, ds)
        for axis, label in (("gflops", "GFLOPs per image (fvcore)"), ("latency", "latency per image, batch 1 (ms)")):
            rows = []
            with_pub = axis == "gflops" and pub and pub_ds != ds
            fig, axes = plt.subplots(1, 2 if with_pub else 1, figsize=(10 if with_pub else 6.4, 4), squeeze=False)
            ax = axes[0][0]
            for m, f in d["frontier"].items():
                b = f[axis]
                r = _curve(ax, b["cost"], [{"mean": mu, "half_width": h} for mu, h in zip(b["mean"], b["half_width"])],
                           f"{m}, early exit")
                rows += [[m, c, *v, "curve"] for c, v in zip(b["cost"], r)]
            statics = []
            for i, m in enumerate(agg["static"]):
                v = d["models"][m]
                x = v["gflops"][-1] if axis == "gflops" else v["latency_ms"][-1]
                mu, lo, hi = band(v["top1"][-1])
                rows.append([m, x, mu, lo, hi, "point"])
                ax.errorbar([x], [mu], yerr=[[mu - lo], [hi - mu]], fmt="s", capsize=3, color="black",
                            label="static models (mean ± 95% CI)" if i == 0 else None)
                statics.append((x, mu, m.replace("sf-", "")))
            _label_points(ax, statics)
            if axis == "gflops" and pub and pub_ds == ds:
                xs, ys = zip(*pub.values())
                ax.scatter(xs, ys, label="published (1 run)", **PUBLISHED)
                rows += [[row, x, y, y, y, "published"] for row, (x, y) in pub.items()]
            _log_ticks(ax, [x for x, _, _ in statics])
            ax.set(xlabel=label, ylabel="test top-1 (%)",
                   title=f"Accuracy vs {'GFLOPs' if axis == 'gflops' else 'latency'} ({ds}, test-split sweep)")
            ax.legend(fontsize=7)
            if with_pub:
                pax = axes[0][1]
                for row, (x, y) in sorted(pub.items(), key=lambda kv: kv[1][0]):
                    marker = "s" if row.startswith("static") else "o"
                    pax.scatter([x], [y], marker=marker, color="black" if marker == "s" else "tab:blue")
                    pax.annotate(row.replace("recurrent ", "rec. "), (x, y), textcoords="offset points",
                                 xytext=(4, -10), fontsize=7)
                _log_ticks(pax, [x for row, (x, _) in pub.items() if row.startswith("static")])
                pax.set(xlabel="GFLOPs per image (as published)", ylabel="top-1 (%)",
                        title=f"As published ({pub_ds}, one run per model)")
            save(fig, out / f"frontier_{axis}_{ds}.png")
            write_csv(out / ("dvc/frontier" if axis == "gflops" else ".") / f"frontier_{axis}_{ds}.csv",
                      ["model", axis, "top1", "low", "high", "kind"], rows)
        rec = d["frontier"][agg["recurrent"]]
        share = rec["exit_share"]
        write_csv(out / f"rounds_used_{ds}.csv", ["threshold", "round", "share"],
                  [[th, r + 1, s] for th, row in zip(rec["thresholds"], share) for r, s in enumerate(row)])
        fig, ax = plt.subplots(figsize=(6.4, 3.4))
        bottom = [0.0] * len(share)
        for r in range(len(share[0])):
            vals = [row[r] for row in share]
            ax.bar(range(len(share)), vals, bottom=bottom, label=f"round {r + 1}")
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.set_xticks(range(len(share)), [f"{t:g}" for t in rec["thresholds"]], rotation=60, fontsize=7)
        ax.set(xlabel="confidence threshold", ylabel="share of test images",
               title=f"Rounds used by {agg['recurrent']} ({ds})")
        ax.legend(fontsize=7)
        save(fig, out / f"rounds_used_{ds}.png")
        learning_curves(d["curves"], out / f"learning_curves_{ds}.png",
                        out / "dvc" / "curves" / f"learning_curves_{ds}.csv", f"Learning curves ({ds})")
