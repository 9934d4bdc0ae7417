"""How many seeds a claim needs: the sample size of a two-sided paired t-test (or a one-sample t-test of a
quantity such as a compute saving) at a given power, from the noncentral t distribution.

For a published effect delta and the observed standard deviation sd of the per-seed differences, the
standardised effect is d = delta / sd and the test with n seeds has power P(|T| > t_crit) where T follows a
noncentral t with n - 1 degrees of freedom and noncentrality d * sqrt(n). At d = 1, alpha 0.05 and 80 % power
this gives n = 10 (docs/design.md, Statistics: power 0.80 with n = 10).
"""
from __future__ import annotations

import math

from scipy import stats

MAX_SEEDS = 10_000


def paired_t_power(effect_size: float, n: int, alpha: float = 0.05) -> float:
    """Power of the two-sided one-sample / paired t-test with n observations at standardised effect d."""
    if n < 2:
        return float("nan")
    df = n - 1
    crit = stats.t.ppf(1 - alpha / 2, df)
    nc = abs(effect_size) * math.sqrt(n)
    return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


def seeds_needed(delta: float, sd: float, power: float = 0.8, alpha: float = 0.05) -> int | None:
    """Smallest n with paired_t_power(delta / sd, n) >= power; None when it cannot be computed (no spread
    observed, no effect) or exceeds MAX_SEEDS."""
    if sd is None or delta is None or not (math.isfinite(sd) and math.isfinite(delta)) or sd <= 0 or delta == 0:
        return None
    d = abs(delta) / sd
    # power rises with n: start from the normal approximation (within a few seeds of the answer) and walk
    n = max(2, math.ceil(((stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) / d) ** 2))
    if n > 4 * MAX_SEEDS:
        return None
    while paired_t_power(d, n, alpha) < power:
        n += 1
        if n > MAX_SEEDS:
            return None
    while n > 2 and paired_t_power(d, n - 1, alpha) >= power:
        n -= 1
    return n if n <= MAX_SEEDS else None
