"""The forest plot of the claims ledger (plots/forest.png): every tested row, its estimate and 95 % t-interval
against the published value, as replication projects show their results.

One panel per unit (points of top-1, fraction of compute, time ratio), so every row is read on the scale it
states; the null (no effect) is the dashed line, the published value or range the hollow diamond(s); the colour is
what the verdict says (held, reversed, smaller or larger than published, inconclusive, not exercised). Rows are
the ledger's statistical entries with an estimate, in ledger order, labelled by document and test.
"""
from __future__ import annotations

from pathlib import Path

from itervision.reporting.figures import PUBLISHED, plt, save

# verdict outcome -> colour (colour-blind safe, Okabe-Ito) and legend label
OUTCOMES = {"holds": ("#009E73", "holds"), "reversed": ("#D55E00", "reversed"),
            "size": ("#E69F00", "smaller / larger than published"), "inconclusive": ("#0072B2", "inconclusive"),
            "not_exercised": ("#999999", "not exercised (mechanism check failed)")}


def outcome_class(verdict: str) -> str:
    v = verdict.lower()
    if v.startswith("not exercised"):
        return "not_exercised"
    if "reversed" in v or v.startswith("contradicted (reversed)"):
        return "reversed"
    if v.startswith(("holds", "reproduced")):
        return "holds"
    if "than published" in v:
        return "size"
    return "inconclusive"


def tested_rows(rows: list[dict]) -> list[dict]:
    """The rows the forest draws: statistical entries with a mean and an interval."""
    return [r for r in rows if r.get("kind") == "statistical" and r.get("plot")
            and r["plot"].get("mean") is not None and r["plot"].get("half_width") is not None]


def write_forest(rows: list[dict], path: Path) -> list[str]:
    """Draw every tested row; returns the test ids drawn, in order."""
    drawn = tested_rows(rows)
    units = list(dict.fromkeys(r["plot"]["unit"] or "value" for r in drawn))
    if not drawn:
        fig, ax = plt.subplots(figsize=(6, 1.2))
        ax.text(0.5, 0.5, "no tested row at this scale", ha="center", va="center")
        ax.axis("off")
        save(fig, path)
        return []
    heights = [max(1, sum(1 for r in drawn if (r["plot"]["unit"] or "value") == u)) for u in units]
    fig, axes = plt.subplots(len(units), 1, figsize=(8.5, 0.9 + 0.36 * sum(heights) + 0.5 * len(units)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, unit in zip(axes[:, 0], units):
        sel = [r for r in drawn if (r["plot"]["unit"] or "value") == unit]
        for i, r in enumerate(sel):
            y = len(sel) - 1 - i
            pl = r["plot"]
            colour = OUTCOMES[outcome_class(r["verdict"])][0]
            ax.errorbar(pl["mean"], y, xerr=pl["half_width"], fmt="o", color=colour, capsize=3, ms=5, lw=1.6)
            for pub in pl.get("published") or []:
                ax.scatter([pub], [y], **PUBLISHED)
            ax.axvline(pl.get("null", 0.0), color="black", lw=0.8, ls="--", zorder=0)
        ax.set_yticks(range(len(sel)))
        ax.set_yticklabels([f"{r['document']}: {r['test_id']} (n {r.get('n', '')})"[:70] for r in reversed(sel)],
                           fontsize=8)
        ax.set_xlabel({"points": "difference in top-1 (points)", "fraction of compute": "compute saving (fraction)",
                       "time ratio": "training time ratio"}.get(unit, unit), fontsize=9)
        ax.set_ylim(-0.7, len(sel) - 0.3)
        ax.grid(axis="x", color="#eee")
    handles = [plt.Line2D([], [], color=c, marker="o", ls="-", label=label) for c, label in OUTCOMES.values()]
    handles.append(plt.Line2D([], [], marker="D", ls="", markerfacecolor="none", markeredgecolor="grey",
                              label="published"))
    handles.append(plt.Line2D([], [], color="black", ls="--", lw=0.8, label="no effect"))
    axes[0, 0].legend(handles=handles, fontsize=7, loc="lower left", bbox_to_anchor=(0, 1.02), ncol=3, frameon=False)
    axes[0, 0].set_title("Every tested claim: mean and 95 % t-interval over seeds, against the published value",
                         fontsize=10, pad=44)
    fig.tight_layout()
    save(fig, path)
    return [r["test_id"] for r in drawn]
