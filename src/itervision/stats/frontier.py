"""Accuracy-vs-cost frontiers across seeds (rule 5 and 6 of the statistics notes).

Per seed: the monotone upper envelope of a threshold sweep, accuracy interpolated linearly in log cost on a
grid every seed covers (never extrapolated), a pointwise mean +- t band; and the inverse: the cost a seed
needs to reach an accuracy.
"""
from __future__ import annotations

import numpy as np

from itervision.stats.inference import mean_ci


def monotone_envelope(costs, accuracies) -> tuple[np.ndarray, np.ndarray]:
    """Points of the sweep that no cheaper (or equally cheap) point beats: cost ascending, accuracy strictly
    increasing. Ties in cost keep the best accuracy."""
    c = np.asarray(costs, dtype=np.float64)
    a = np.asarray(accuracies, dtype=np.float64)
    ok = np.isfinite(c) & np.isfinite(a) & (c > 0)
    c, a = c[ok], a[ok]
    order = np.lexsort((-a, c))  # by cost, best accuracy first within a cost
    keep_c, keep_a = [], []
    for ci, ai in zip(c[order], a[order]):
        if keep_a and ai <= keep_a[-1]:
            continue
        if keep_c and ci == keep_c[-1]:
            continue
        keep_c.append(ci)
        keep_a.append(ai)
    return np.array(keep_c), np.array(keep_a)


def interpolate_log_cost(costs, accuracies, grid) -> np.ndarray:
    """Envelope accuracy at each grid cost, linear in log cost; NaN outside the envelope's cost range."""
    c, a = monotone_envelope(costs, accuracies)
    g = np.asarray(grid, dtype=np.float64)
    out = np.full(g.shape, np.nan)
    if len(c) == 0:
        return out
    inside = (g >= c[0] * (1 - 1e-12)) & (g <= c[-1] * (1 + 1e-12))
    if len(c) == 1:
        out[inside] = a[0]
        return out
    out[inside] = np.interp(np.log(g[inside]), np.log(c), a)
    return out


def shared_log_grid(curves, points: int = 50) -> np.ndarray:
    """A log-spaced cost grid inside every curve's envelope range (empty if the ranges do not overlap)."""
    lows, highs = [], []
    for costs, accs in curves:
        c, _ = monotone_envelope(costs, accs)
        if len(c) == 0:
            return np.array([])
        lows.append(c[0])
        highs.append(c[-1])
    lo, hi = max(lows), min(highs)
    if lo > hi:
        return np.array([])
    if lo == hi:
        return np.array([lo])
    return np.exp(np.linspace(np.log(lo), np.log(hi), points))


def mean_band(curves, grid) -> dict:
    """Pointwise mean and t half-width over seeds of the interpolated curves."""
    values = np.array([interpolate_log_cost(c, a, grid) for c, a in curves])
    rows = [mean_ci(values[:, j]) for j in range(len(grid))]
    return {"cost": np.asarray(grid).tolist(), "mean": [r["mean"] for r in rows],
            "half_width": [r["half_width"] for r in rows], "n": [r["n"] for r in rows]}


def cost_to_reach(costs, accuracies, target: float) -> float:
    """Smallest cost at which the envelope (linear in log cost) reaches `target`; NaN if it never does."""
    c, a = monotone_envelope(costs, accuracies)
    if len(c) == 0 or a[-1] < target:
        return float("nan")
    if a[0] >= target:
        return float(c[0])
    j = int(np.argmax(a >= target))  # first envelope point at or above the target
    frac = (target - a[j - 1]) / (a[j] - a[j - 1])
    return float(np.exp(np.log(c[j - 1]) + frac * (np.log(c[j]) - np.log(c[j - 1]))))
