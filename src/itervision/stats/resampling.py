"""Interval estimates beside the t-interval: the probability of improvement with a stratified bootstrap
interval, and a bootstrap interval of the mean paired difference. Both come from scipy.stats.bootstrap with a
fixed generator, so they are reproducible to the bit.

Written on scipy rather than with rliable 1.2.0 or deepsig 1.2.8: rliable's probability of improvement is this
same statistic (the Mann-Whitney U over all pairs of runs, normalised), but it pins `arch` and a seaborn stack
that do not fit the pinned environment, and its `random_state` does not make its intervals reproducible
(docs/design.md, Statistics); deepsig tests a different quantity (almost stochastic order). scipy's
bootstrap resamples each sample on its own, which for two variants on one dataset is rliable's stratified
bootstrap (the strata are the variants' runs).

At 3-5 seeds bootstrap intervals are too narrow (coverage 0.71-0.84 for a nominal 0.95 in the notes'
simulations): they are shown beside the t-intervals, never instead of them.
"""
from __future__ import annotations

import warnings

import numpy as np
from scipy import stats

NAN = float("nan")
RESAMPLES = 10_000


def _finite(values) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    return v[np.isfinite(v)]


def probability_of_improvement(a, b) -> float:
    """P(A > B) over all pairs of runs of A and B, ties counting one half (rliable's definition)."""
    a, b = _finite(a), _finite(b)
    if not len(a) or not len(b):
        return NAN
    wins = (a[:, None] > b[None, :]).mean()
    ties = (a[:, None] == b[None, :]).mean()
    return float(wins + 0.5 * ties)


def _poi_statistic(a, b, axis=-1):
    """Vectorised P(A > B) for scipy.stats.bootstrap (resamples along the last axis)."""
    a, b = np.moveaxis(a, axis, -1), np.moveaxis(b, axis, -1)
    greater = (a[..., :, None] > b[..., None, :]).mean(axis=(-2, -1))
    equal = (a[..., :, None] == b[..., None, :]).mean(axis=(-2, -1))
    return greater + 0.5 * equal


def probability_of_improvement_ci(a, b, seed: int = 0, confidence: float = 0.95) -> dict:
    """P(A > B) with a percentile bootstrap interval, A's and B's runs resampled separately (stratified)."""
    a, b = _finite(a), _finite(b)
    point = probability_of_improvement(a, b)
    if len(a) < 2 or len(b) < 2:
        return {"p_improvement": point, "low": NAN, "high": NAN, "n": (len(a), len(b))}
    res = stats.bootstrap((a, b), _poi_statistic, n_resamples=RESAMPLES, vectorized=True, paired=False,
                          confidence_level=confidence, method="percentile", rng=np.random.default_rng(seed))
    return {"p_improvement": point, "low": float(res.confidence_interval.low),
            "high": float(res.confidence_interval.high), "n": (len(a), len(b))}


def bootstrap_mean_ci(values, seed: int = 0, confidence: float = 0.95) -> dict:
    """Mean with a BCa bootstrap interval (percentile where BCa is undefined: every value equal)."""
    v = _finite(values)
    if len(v) < 2:
        return {"mean": float(v.mean()) if len(v) else NAN, "low": NAN, "high": NAN, "n": len(v), "method": None}
    if np.all(v == v[0]):
        return {"mean": float(v[0]), "low": float(v[0]), "high": float(v[0]), "n": len(v), "method": "constant"}
    with warnings.catch_warnings():  # BCa on a tiny sample may warn about degenerate jackknife values
        warnings.simplefilter("ignore")
        res = stats.bootstrap((v,), np.mean, n_resamples=RESAMPLES, confidence_level=confidence, method="BCa",
                              rng=np.random.default_rng(seed))
    low, high, method = res.confidence_interval.low, res.confidence_interval.high, "BCa"
    if not (np.isfinite(low) and np.isfinite(high)):
        res = stats.bootstrap((v,), np.mean, n_resamples=RESAMPLES, confidence_level=confidence,
                              method="percentile", rng=np.random.default_rng(seed))
        low, high, method = res.confidence_interval.low, res.confidence_interval.high, "percentile"
    return {"mean": float(v.mean()), "low": float(low), "high": float(high), "n": len(v), "method": method}


def paired_bootstrap(a, b, seed: int = 0) -> dict:
    """Bootstrap interval of the mean paired difference a - b (pairs with a NaN dropped) and P(A > B)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    keep = np.isfinite(a) & np.isfinite(b)
    out = bootstrap_mean_ci(a[keep] - b[keep], seed)
    poi = probability_of_improvement_ci(a[keep], b[keep], seed)
    return {"diff_mean": out["mean"], "diff_low": out["low"], "diff_high": out["high"], "diff_method": out["method"],
            "p_improvement": poi["p_improvement"], "p_improvement_low": poi["low"], "p_improvement_high": poi["high"],
            "n": int(keep.sum())}
