"""Figures of the recursive-classifier study (PNG) and their data (CSV), from metrics/recursive/aggregate.json."""
from __future__ import annotations

from pathlib import Path

from matplotlib.ticker import MaxNLocator

from itervision.layout import reference_csv
from itervision.reporting.figures import abs_band, band, curve, learning_curves, plt, save, write_csv
from itervision.reporting.tables import load_reference

# what `dvc plots show` draws (templates in .dvc/plots/); the generated dvc.yaml lists these
DVC_PLOTS = {
    "plots/recursive/dvc/accuracy_per_step.csv": {
        "title": "Recursive classifier, test top-1 (%) at every step, every variant (mean and 95% t-band over seeds)",
        "x": "step", "y": "top1", "x_label": "recursion step", "y_label": "test top-1 (%)", "template": "band_int"},
    "plots/recursive/dvc/sparsity_accuracy.csv": {
        "title": "Sparsity budget k, test top-1 (%) (mean and 95% t-interval)", "x": "sparsity", "y": "top1",
        "x_label": "average attention sparsity (formula)", "y_label": "test top-1 (%)", "template": "band"},
    "plots/recursive/dvc/learning_curves.csv": {
        "title": "Recursive classifier, top-1 (%) of the last exit against training images (test and calib)",
        "x": "images", "y": "top1", "x_label": "training images seen", "y_label": "top-1 of the last exit (%)",
        "template": "band_split"},
    "plots/recursive/dvc/ece_per_step.csv": {
        "title": "Recursive classifier, expected calibration error (%) at every step (mean and 95% t-band)",
        "x": "step", "y": "ece", "x_label": "recursion step", "y_label": "expected calibration error (%)",
        "template": "band_int"},
}


def accuracy_per_step_figure(agg: dict, ref: dict, out: Path) -> None:
    """Accuracy at every step of every variant, with bands; the published operating point as a line."""
    ds0 = agg["datasets"][0]
    rows = []
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for m, ps in agg["per_step"].items():
        steps = list(range(1, len(ps["top1"]) + 1))
        r = curve(ax, steps, ps["top1"], m, marker="o", ms=3, ls="-" if m in agg["accuracy"][ds0] else "--")
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


def sparsity_figure(agg: dict, ref: dict, out: Path) -> None:
    """Top-1 against the sparsity budget k (formula sparsity), with the published k = 2 and 6 marked."""
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
    write_csv(out / "dvc" / "sparsity_accuracy.csv", ["model", "k", "sparsity", "top1", "low", "high", "kind"],
              [["k ablation"] + r + ["curve"] for r in rows])  # one series: the legend names it


def traces_figures(agg: dict, out: Path) -> None:
    """Expert utilisation per step (heat map) and attention mass per token role (CSV)."""
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
              [[i + 1, role, s["mean"], *abs_band(s)] for role, series in rm.items()
               for i, s in enumerate(series)])


def calibration_figure(agg: dict, out: Path) -> None:
    """Expected calibration error at every step of each stepped main model."""
    em = agg.get("early_exit_metrics") or {}
    rows = []
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for m, e in em.items():
        steps = list(range(1, len(e["ece"]) + 1))
        r = curve(ax, steps, e["ece"], m, marker="o", ms=3)
        rows += [[m, s, *v, "curve"] for s, v in zip(steps, r)]
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="recursion step (exit)", ylabel="expected calibration error (%)",
           title=f"Calibration at every step ({agg['datasets'][0]})")
    if em:
        ax.legend(fontsize=7)
    save(fig, out / "ece_per_step.png")
    write_csv(out / "dvc" / "ece_per_step.csv", ["model", "step", "ece", "low", "high", "kind"], rows)


def write_figures(agg: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    ref = load_reference(reference_csv("recursive"))
    accuracy_per_step_figure(agg, ref, out)
    sparsity_figure(agg, ref, out)
    traces_figures(agg, out)
    calibration_figure(agg, out)
    learning_curves(agg["curves"], out / "learning_curves.png", out / "dvc" / "learning_curves.csv",
                    f"Learning curves ({agg['datasets'][0]})")
