"""Figures (PNG) and their data (CSV, also read by `dvc plots`)."""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from itervision.io import atomic_path, write_text  # noqa: E402


def _band(stat) -> tuple[float, float, float]:
    m, h = stat["mean"], stat.get("half_width", float("nan"))
    h = 0.0 if not math.isfinite(h) else h
    return m, m - h, m + h


def write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    write_text(path, ",".join(header) + "\n" + "".join(",".join(f"{v:.6g}" if isinstance(v, float) else str(v)
                                                                for v in r) + "\n" for r in rows))


def save(fig, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def recursive_figures(agg: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    ps = agg["per_step"]
    rows = [[i + 1, *(_band(s))] for i, s in enumerate(ps["top1"])]
    write_csv(out / "accuracy_per_step.csv", ["step", "top1", "low", "high"], rows)
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.plot([r[0] for r in rows], [r[1] * 100 for r in rows], marker="o", label=ps["model"])
    ax.fill_between([r[0] for r in rows], [r[2] * 100 for r in rows], [r[3] * 100 for r in rows], alpha=0.25,
                    label="95% t-band")
    ax.set(xlabel="recursion step (exit)", ylabel="test top-1 (%)", title=f"Accuracy per step ({ps['dataset']})")
    ax.legend()
    save(fig, out / "accuracy_per_step.png")

    rows = [[r["topk"], r["avg_sparsity_formula"], *(_band(r["top1"]))] for r in agg["k_ablation"]]
    write_csv(out / "sparsity_accuracy.csv", ["k", "sparsity", "top1", "low", "high"], rows)
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.errorbar([r[1] for r in rows], [r[2] * 100 for r in rows], yerr=[(r[2] - r[3]) * 100 for r in rows],
                fmt="o-", capsize=3)
    for r in rows:
        ax.annotate(f"k={r[0]}", (r[1], r[2] * 100), textcoords="offset points", xytext=(4, 4))
    ax.set(xlabel="average attention sparsity (formula)", ylabel="test top-1 (%)", title="Sparsity budget")
    save(fig, out / "sparsity_accuracy.png")

    util = agg["traces"]["expert_utilisation"]
    if util:
        write_csv(out / "expert_utilisation.csv", ["step", "expert", "share"],
                  [[t + 1, e, u] for t, row in enumerate(util) for e, u in enumerate(row)])
        fig, ax = plt.subplots(figsize=(5, 3.4))
        im = ax.imshow([list(r) for r in zip(*util)], aspect="auto", cmap="viridis",
                       extent=(0.5, len(util) + 0.5, len(util[0]) - 0.5, -0.5))
        fig.colorbar(im, ax=ax, label="share of routed tokens")
        ax.set(xlabel="recursion step", ylabel="expert", title=f"Expert utilisation ({agg['traces']['model']})")
        save(fig, out / "expert_utilisation.png")
    rm = agg["traces"]["role_mass"]
    write_csv(out / "role_mass.csv", ["step", "role", "mass", "low", "high"],
              [[i + 1, role, *(_band(s))] for role, series in rm.items() for i, s in enumerate(series)])


def sparseformer_figures(agg: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for ds, d in agg["datasets"].items():
        for axis, label in (("gflops", "GFLOPs per image (fvcore)"), ("latency", "latency per image, batch 1 (ms)")):
            rows = []
            fig, ax = plt.subplots(figsize=(6, 4))
            for m, f in d["frontier"].items():
                band = f[axis]
                hw = [0.0 if not math.isfinite(h) else h for h in band["half_width"]]
                rows += [[m, c, mu, mu - h, mu + h] for c, mu, h in zip(band["cost"], band["mean"], hw)]
                ax.plot(band["cost"], [v * 100 for v in band["mean"]], label=f"{m} early exit")
                ax.fill_between(band["cost"], [(v - h) * 100 for v, h in zip(band["mean"], hw)],
                                [(v + h) * 100 for v, h in zip(band["mean"], hw)], alpha=0.2)
            for m in agg["static"]:
                v = d["models"][m]
                x = v["gflops"][-1] if axis == "gflops" else v["latency_ms"][-1]["mean"]
                mu, lo, hi = _band(v["top1"][-1])
                rows.append([m, x, mu, lo, hi])
                ax.errorbar([x], [mu * 100], yerr=[(mu - lo) * 100], fmt="s", capsize=3, color="black")
                ax.annotate(m.replace("sf-", ""), (x, mu * 100), textcoords="offset points", xytext=(4, -10),
                            fontsize=7)
            ax.set_xscale("log")
            ax.set(xlabel=label, ylabel="test top-1 (%)", title=f"Accuracy vs {axis} ({ds}, test-split sweep)")
            ax.legend(fontsize=7)
            save(fig, out / f"frontier_{axis}_{ds}.png")
            write_csv(out / f"frontier_{axis}_{ds}.csv", ["model", axis, "top1", "low", "high"], rows)
            if axis == "gflops":  # one file per model for `dvc plots` (plots/sparseformer/dvc/)
                for m in sorted({r[0] for r in rows}):
                    write_csv(out / "dvc" / f"frontier_{ds}_{m}.csv", ["gflops", "top1", "low", "high"],
                              [r[1:] for r in rows if r[0] == m])
        rec = d["frontier"][agg["recurrent"]]
        share = rec["exit_share"]
        write_csv(out / f"rounds_used_{ds}.csv", ["threshold", "round", "share"],
                  [[th, r + 1, s] for th, row in zip(rec["thresholds"], share) for r, s in enumerate(row)])
        fig, ax = plt.subplots(figsize=(6, 3.4))
        bottom = [0.0] * len(share)
        for r in range(len(share[0])):
            vals = [row[r] for row in share]
            ax.bar(range(len(share)), vals, bottom=bottom, label=f"round {r + 1}")
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.set_xticks(range(len(share)), [f"{t:g}" for t in rec["thresholds"]], rotation=60, fontsize=7)
        ax.set(xlabel="confidence threshold", ylabel="share of test images", title=f"Rounds used ({ds})")
        ax.legend(fontsize=7)
        save(fig, out / f"rounds_used_{ds}.png")
