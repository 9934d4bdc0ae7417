"""Figures of the recurrent SparseFormer study (PNG) and their data (CSV), from metrics/sparseformer/aggregate.json."""
from __future__ import annotations

from pathlib import Path

from itervision.layout import reference_csv
from itervision.reporting.figures import (PUBLISHED, band, curve, label_points, learning_curves, log_ticks, plt, save,
                                          write_csv)
from itervision.reporting.tables import load_reference

# what `dvc plots show` draws (templates in .dvc/plots/); the generated dvc.yaml lists these
DVC_PLOTS = {
    "plots/sparseformer/dvc/frontier": {
        "title": "SparseFormer, test top-1 (%) against GFLOPs per image (early-exit curves with bands, static points)",
        "x": "gflops", "y": "top1", "x_label": "GFLOPs per image (log scale)", "y_label": "test top-1 (%)",
        "template": "band_logx"},
    "plots/sparseformer/dvc/curves": {
        "title": "SparseFormer, top-1 (%) of the last exit against training images (test and calib)",
        "x": "images", "y": "top1", "x_label": "training images seen", "y_label": "top-1 of the last exit (%)",
        "template": "band_split"},
    "plots/sparseformer/dvc/calibration": {
        "title": "SparseFormer, expected calibration error (%) of every exit (mean and 95% t-band over seeds)",
        "x": "exit", "y": "ece", "x_label": "exit (round)", "y_label": "expected calibration error (%)",
        "template": "band_int"},
    "plots/sparseformer/dvc/budget": {
        "title": "SparseFormer early exit, test top-1 (%) at a fraction of the largest static model's cost",
        "x": "fraction", "y": "top1", "x_label": "fraction of the largest static model's GFLOPs",
        "y_label": "test top-1 (%)", "template": "band"},
}


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


def frontier_figure(agg: dict, d: dict, ds: str, axis: str, published: tuple, out: Path) -> None:
    """Early-exit curves (mean and band over seeds) and static points against GFLOPs or latency; the published
    points on the same axes (same dataset) or in a panel beside (another dataset)."""
    pub_ds, pub = published
    label = "GFLOPs per image (fvcore)" if axis == "gflops" else "latency per image, batch 1 (ms)"
    rows = []
    with_pub = axis == "gflops" and pub and pub_ds != ds
    fig, axes = plt.subplots(1, 2 if with_pub else 1, figsize=(10 if with_pub else 6.4, 4), squeeze=False)
    ax = axes[0][0]
    for m, f in d["frontier"].items():
        b = f[axis]
        r = curve(ax, b["cost"], [{"mean": mu, "half_width": h} for mu, h in zip(b["mean"], b["half_width"])],
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
    label_points(ax, statics)
    if axis == "gflops" and pub and pub_ds == ds:
        xs, ys = zip(*pub.values())
        ax.scatter(xs, ys, label="published (1 run)", **PUBLISHED)
        rows += [[row, x, y, y, y, "published"] for row, (x, y) in pub.items()]
    log_ticks(ax, [x for x, _, _ in statics])
    ax.set(xlabel=label, ylabel="test top-1 (%)",
           title=f"Accuracy vs {'GFLOPs' if axis == 'gflops' else 'latency'} ({ds}, test-split sweep)")
    ax.legend(fontsize=7)
    if with_pub:
        published_panel(axes[0][1], pub, pub_ds)
    save(fig, out / f"frontier_{axis}_{ds}.png")
    write_csv(out / ("dvc/frontier" if axis == "gflops" else ".") / f"frontier_{axis}_{ds}.csv",
              ["model", axis, "top1", "low", "high", "kind"], rows)


def published_panel(ax, pub: dict, pub_ds: str) -> None:
    for row, (x, y) in sorted(pub.items(), key=lambda kv: kv[1][0]):
        marker = "s" if row.startswith("static") else "o"
        ax.scatter([x], [y], marker=marker, color="black" if marker == "s" else "tab:blue")
        ax.annotate(row.replace("recurrent ", "rec. "), (x, y), textcoords="offset points", xytext=(4, -10),
                    fontsize=7)
    log_ticks(ax, [x for row, (x, _) in pub.items() if row.startswith("static")])
    ax.set(xlabel="GFLOPs per image (as published)", ylabel="top-1 (%)",
           title=f"As published ({pub_ds}, one run per model)")


def rounds_used_figure(agg: dict, d: dict, ds: str, out: Path) -> None:
    """Share of test images that stop after each round, per display threshold."""
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


def early_exit_figure(agg: dict, d: dict, ds: str, out: Path) -> None:
    """The early-exit panel: the frontier with each model's oracle bound, and the rounds the calibrated thresholds
    use at each budget (share of test images per round, mean over seeds)."""
    fig, (ax, hx) = plt.subplots(1, 2, figsize=(11, 4))
    for m, f in d["frontier"].items():
        b = f["gflops"]
        curve(ax, b["cost"], [{"mean": mu, "half_width": h} for mu, h in zip(b["mean"], b["half_width"])],
              f"{m}, early exit")
        o = d["early_exit_metrics"][m]
        mu, lo, hi = band(o["oracle_accuracy"])
        ax.errorbar([o["oracle_cost"]["mean"]], [mu], yerr=[[mu - lo], [hi - mu]], fmt="*", ms=10, capsize=3,
                    color=ax.lines[-1].get_color(), label=f"{m}, oracle exit (bound)")
    for m in agg["static"]:
        v = d["models"][m]
        mu, lo, hi = band(v["top1"][-1])
        ax.errorbar([v["gflops"][-1]], [mu], yerr=[[mu - lo], [hi - mu]], fmt="s", capsize=3, color="black")
    log_ticks(ax, [d["models"][m]["gflops"][-1] for m in agg["static"]])
    ax.set(xlabel="GFLOPs per image (fvcore)", ylabel="test top-1 (%)", title=f"Early exit and its oracle ({ds})")
    ax.legend(fontsize=7)
    rows = [r for r in d["matched_cost"]]
    bottom = [0.0] * len(rows)
    for r in range(len(rows[0]["exit_share"]) if rows else 0):
        vals = [100 * (row["exit_share"][r]["mean"] if row["exit_share"][r]["n"] else 0.0) for row in rows]
        hx.bar(range(len(rows)), vals, bottom=bottom, label=f"round {r + 1}")
        bottom = [b + v for b, v in zip(bottom, vals)]
    hx.set_xticks(range(len(rows)), [row["budget_model"].replace("sf-", "at ") for row in rows], fontsize=8)
    hx.set(ylabel="share of test images (%)", title=f"Rounds used at each budget ({agg['recurrent']})")
    hx.legend(fontsize=7)
    save(fig, out / f"early_exit_{ds}.png")
    ece_rows = [[m, e + 1, *band(s), "curve"] for m, v in d["models"].items() for e, s in enumerate(v["ece"])]
    write_csv(out / "dvc" / "calibration" / f"ece_{ds}.csv", ["model", "exit", "ece", "low", "high", "kind"],
              ece_rows)
    budget_rows = [[m, f, *band(e[f"accuracy_at_{int(100 * f)}"]), "curve"]
                   for m, e in d["early_exit_metrics"].items() for f in (0.25, 0.5, 0.75, 1.0)
                   if e[f"accuracy_at_{int(100 * f)}"]["n"]]
    write_csv(out / "dvc" / "budget" / f"accuracy_at_budget_{ds}.csv", ["model", "fraction", "top1", "low", "high",
                                                                       "kind"], budget_rows)


def write_figures(agg: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    ref = load_reference(reference_csv("sparseformer"))
    for ds, d in agg["datasets"].items():
        published = _published_frontier(ref, ds)
        for axis in ("gflops", "latency"):
            frontier_figure(agg, d, ds, axis, published, out)
        rounds_used_figure(agg, d, ds, out)
        early_exit_figure(agg, d, ds, out)
        learning_curves(d["curves"], out / f"learning_curves_{ds}.png",
                        out / "dvc" / "curves" / f"learning_curves_{ds}.csv", f"Learning curves ({ds})")
