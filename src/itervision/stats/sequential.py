"""Group-sequential paired t-tests that keep their error rate when seeds are added after a look (`make settle`).

The design: a two-sided test of the mean per-seed difference with Lan-DeMets alpha spending of the
O'Brien-Fleming type, alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t)), where t = n / max_n is the information
fraction of a look at n seeds. Every look is counted, the first one being the seeds the ledger had already
tested (the pilot). At each look the z boundary c_k solves

    P_H0(no crossing at looks 1..k-1, |Z_k| >= c_k) = alpha(t_k) - alpha(t_{k-1}),

computed here by the recursive numerical integration of Armitage, McPherson and Rowe (1969) over the score
process S_k = Z_k sqrt(t_k), whose increments are independent normals. The boundary is then applied to the t
statistic of the n_k seeds at the same nominal level (the usual small-sample conversion); the simulation in
tests/test_sequential.py checks the false-positive rate of exactly this rule at the pilot n of the CPU scale.

Why O'Brien-Fleming: it spends almost nothing at the early, small looks (1e-6 at a fifth of the information),
so the final look keeps close to the fixed-n test's power and boundary, and a claim's verdict cannot come from
the noisiest look. Why alpha spending rather than fixed looks: a settle's next look is whatever the budget buys,
so the looks are not known in advance; spending only needs max_n, fixed when the sequence starts.

The pilot plans, the new seeds test. max_n comes from the pilot's SD, so a test over the pilot's values too
would gain its error rate exactly when the pilot SD came out small (a small max n spends more alpha early, and
the small SD inflates |t|): through design() and evaluate() that gave 0.0665 +- 0.0012 false positives at alpha
0.05 for a pilot of 5. So the sequence tests only the seeds added after the pilot (independent of everything
the design was chosen from), and its error rate is the procedure's own at any pilot (tests/test_sequential.py:
pilots of 3-5 seeds, planned effects of 0.5-2 SD). The pilot's seeds were the ledger's fixed-n test; they stay in
the tables, not in the sequence.

max_n (of new seeds) is the noncentral-t sample size of the fixed test at the planning SD: Browne's (1995) rule,
the pilot SD's one-sided 80 % upper confidence limit, so that the planned power is reached with probability at
least 0.8 over the pilot's own noise (O'Brien-Fleming's interim looks cost well under a seed of it). alpha is
the level the verdict needs: make settle passes alpha / m, Holm's first step over the document's m tests (the
level a test must reach when it is the family's smallest p; conservative for any other rank). No library this
project already uses computes spending boundaries (statsmodels has none; R's gsDesign and rpact are not
Python), hence this module.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

PROCEDURE = "group-sequential paired t-test, Lan-DeMets O'Brien-Fleming alpha spending"
GRID = 801  # points of the score grid: boundaries within 3e-4 in z of a 2001-point grid


def spent(t: float, alpha: float = 0.05) -> float:
    """Two-sided alpha spent up to information fraction t (O'Brien-Fleming type)."""
    if t <= 0:
        return 0.0
    t = min(t, 1.0)
    return float(2.0 - 2.0 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / math.sqrt(t)))


def _cross(state, t: float, c: float, drift: float) -> float:
    """P(no crossing so far, |Z| >= c at information t) from `state` (the sub-density of the score S at the last
    look on its grid, or None before the first look)."""
    prev_t = state[2] if state else 0.0
    dt, b = t - prev_t, c * math.sqrt(t)  # the boundary on the score scale S = Z sqrt(t)
    sd, mean = math.sqrt(dt), drift * dt
    if state is None:  # S_1 ~ N(drift t, t)
        return float(stats.norm.sf(b, mean, sd) + stats.norm.cdf(-b, mean, sd))
    density, grid, _ = state
    w = density * (grid[1] - grid[0])
    return float(w @ (stats.norm.sf(b - grid - mean, 0, sd) + stats.norm.cdf(-b - grid - mean, 0, sd)))


def _advance(state, t: float, c: float, drift: float):
    """The sub-density of S inside the continuation region |S| < c sqrt(t) at information t."""
    prev_t = state[2] if state else 0.0
    dt, b = t - prev_t, c * math.sqrt(t)
    sd, mean = math.sqrt(dt), drift * dt
    grid = np.linspace(-b, b, GRID)
    if state is None:
        return stats.norm.pdf(grid, mean, sd), grid, t
    density, old, _ = state
    kernel = stats.norm.pdf((grid[:, None] - old[None, :] - mean) / sd) / sd
    return kernel @ (density * (old[1] - old[0])), grid, t


def crossing(fractions: list[float], bounds: list[float], drift: float = 0.0) -> list[float]:
    """P(first crossing at look k) for every look, for the z process with mean drift * sqrt(t) (drift 0: H0;
    drift = effect / sd * sqrt(max_n): the alternative). Crossing = |Z_k| >= c_k (either side)."""
    out, state = [], None
    for k, (t, c) in enumerate(zip(fractions, bounds)):
        out.append(_cross(state, t, c, drift))
        if k < len(bounds) - 1:
            state = _advance(state, t, c, drift)
    return out


def boundaries(fractions: list[float], alpha: float = 0.05) -> list[float]:
    """The two-sided z boundaries c_k of looks at increasing information fractions (the last may be 1)."""
    return list(_boundaries(tuple(float(t) for t in fractions), alpha))


@functools.lru_cache(maxsize=4096)
def _boundaries(fractions: tuple, alpha: float) -> tuple:
    bounds, state = [], None
    for k, t in enumerate(fractions):
        target = spent(t, alpha) - spent(fractions[k - 1], alpha) if k else spent(t, alpha)
        if target <= 1e-15:
            c = 40.0  # nothing to spend at this look: a boundary no statistic reaches
        else:
            c = float(optimize.brentq(lambda x: _cross(state, t, x, 0.0) - target, 0.5, 40.0, xtol=1e-6))
        bounds.append(c)
        if k < len(fractions) - 1:
            state = _advance(state, t, c, 0.0)
    return tuple(bounds)


def t_boundary(z: float, n: int) -> float:
    """The t statistic with n - 1 degrees of freedom at the same two-sided nominal level as z."""
    return float(stats.t.isf(stats.norm.sf(z), n - 1))


def power(looks: list[int], max_n: int, effect: float, sd: float, alpha: float = 0.05) -> float:
    """P(a boundary is crossed by the last of `looks`) at a true effect / sd (normal approximation): the power of
    the design when the looks end at max_n, what looks short of it buy otherwise."""
    fr = [min(1.0, n / max_n) for n in looks]
    return float(sum(crossing(fr, boundaries(fr, alpha), effect / sd * math.sqrt(max_n))))


def sd_limit(sd: float, n: int, level: float = 0.8) -> float:
    """The one-sided `level` upper confidence limit of an SD estimated from n values (chi-square); level 0.025 is
    the lower end of its 95 % interval, 0.975 the upper."""
    return float(sd * math.sqrt((n - 1) / stats.chi2.ppf(1 - level, n - 1)))


def max_seeds(n0: int, effect: float, sd: float, target: float = 0.8, alpha: float = 0.05,
              limit: int = 10_000) -> int | None:
    """max_n of a sequence after a pilot of n0 seeds: n0 plus the new seeds a fixed two-sided t-test at `alpha`
    needs for `target` power at effect / sd (noncentral t, stats/power.py). None when the new seeds exceed
    `limit`: the caller refuses in one line instead of starting an underpowered design."""
    from itervision.stats.power import seeds_needed

    if not (sd > 0 and effect != 0 and math.isfinite(sd) and math.isfinite(effect)):
        return None
    fresh = seeds_needed(effect, sd, target, alpha)
    return None if fresh is None or fresh > limit else n0 + fresh


@dataclass
class Look:
    n: int
    t: float                 # the t statistic of the first n values
    z_bound: float
    t_bound: float
    crossed: bool


def design(pilot, effect: float, target: float = 0.8, level: float = 0.8, alpha: float = 0.05) -> dict:
    """A new sequence's design from its pilot values: the SD, its `level` upper confidence limit, max_n from each
    (the larger one is used), the pilot's n (its seeds plan the sequence and are not part of it) and the looks
    taken so far (the pilot's n: none of the sequence's own yet)."""
    v = np.asarray(pilot, dtype=np.float64)
    sd = float(v.std(ddof=1))
    sd_c = sd_limit(sd, len(v), level)
    return {"procedure": PROCEDURE, "alpha": alpha, "power": target, "effect": abs(effect), "sd_pilot": sd,
            "sd_planning": sd_c, "pilot": len(v), "max_n_point": max_seeds(len(v), effect, sd, target, alpha),
            "max_n": max_seeds(len(v), effect, sd_c, target, alpha), "looks": [len(v)]}


def sequence_power(looks: list[int], max_n: int, pilot: int, effect: float, sd: float, alpha: float = 0.05) -> float:
    """power() of a design whose pilot plans and does not test: the looks beyond the pilot, on the new seeds."""
    fresh = [n - pilot for n in looks if n > pilot]
    return power(fresh, max_n - pilot, effect, sd, alpha) if fresh else 0.0


def evaluate(values, looks: list[int], max_n: int, alpha: float = 0.05, p_value: bool = True,
             pilot: int = 0) -> dict:
    """The sequence over `values` (per-seed differences in the claimed direction, in seed order) at the looks
    taken (numbers of seeds, increasing): every look's statistic and boundary, where it stopped, the decision
    (holds: crossed with a positive mean; reversed: crossed with a negative one; open: not crossed, max_n not
    reached; done: max_n reached without crossing) and the stagewise-ordering p-value of the look it stopped at.
    pilot: the first `pilot` values planned the design and are left out; looks and max_n count every seed, the
    pilot's included (the returned looks too), the statistics only the seeds after it."""
    if pilot:
        out = evaluate(values[pilot:], [n - pilot for n in looks if n > pilot], max_n - pilot, alpha, p_value)
        for x in out["looks"]:
            x["n"] += pilot
        return {**out, "max_n": max_n, "pilot": pilot, "stopped_at": out["stopped_at"] + pilot}
    v = np.asarray(values, dtype=np.float64)
    looks = [n for n in looks if n <= len(v)]
    if not looks:
        return {"procedure": PROCEDURE, "alpha": alpha, "max_n": max_n, "decision": "open", "p": float("nan"),
                "looks": [], "stopped_at": 0, "spent": 0.0}
    fractions = [min(1.0, n / max_n) for n in looks]
    zb = boundaries(fractions, alpha)
    out, stop = [], None
    for n, z in zip(looks, zb):
        x = v[:n]
        sd = float(x.std(ddof=1)) if n >= 2 else float("nan")
        t = float(x.mean() / (sd / math.sqrt(n))) if n >= 2 and sd > 0 else float("nan")
        tb = t_boundary(z, n) if n >= 2 else float("inf")
        crossed = bool(math.isfinite(t) and abs(t) >= tb)
        out.append(Look(n, t, z, tb, crossed))
        if crossed:
            stop = len(out) - 1
            break
    k = stop if stop is not None else len(out) - 1
    last = out[k]
    # stagewise p: crossing earlier than look k under H0, or at look k beyond the observed statistic
    z_obs = float(stats.norm.isf(stats.t.sf(abs(last.t), last.n - 1))) if math.isfinite(last.t) else 0.0
    p = float("nan")
    if p_value:  # what crossed earlier spent exactly alpha(t_{k-1}) under H0
        earlier = spent(fractions[k - 1], alpha) if k else 0.0
        at_k = crossing(fractions[: k + 1], zb[:k] + [max(z_obs, 0.0)])[-1] if math.isfinite(last.t) else 1.0
        p = min(1.0, earlier + at_k)
    if stop is not None:
        decision = "holds" if last.t > 0 else "reversed"
    else:
        decision = "done" if looks and looks[-1] >= max_n else "open"
    return {"procedure": PROCEDURE, "alpha": alpha, "max_n": max_n, "decision": decision, "p": p,
            "looks": [vars(x) for x in out], "stopped_at": last.n, "spent": spent(fractions[k], alpha)}
