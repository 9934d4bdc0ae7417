"""The group-sequential test behind make settle (stats/sequential.py): boundaries against closed forms and a
Brownian-motion Monte Carlo, the planning n against the noncentral t, and the error rate and power of the whole
procedure (pilot -> design -> looks -> decision, the functions the command and the ledger call) in simulated
paired experiments at this scale's pilot n."""
import math

import numpy as np
import pytest
from scipy import stats

from itervision.stats.power import seeds_needed
from itervision.stats.sequential import (boundaries, sd_limit, crossing, design, evaluate, max_seeds, spent,
                                         t_boundary)


def test_spending_is_obrien_fleming_type_and_one_look_is_the_fixed_test():
    assert spent(1.0) == pytest.approx(0.05, abs=1e-12)
    assert spent(0.25) == pytest.approx(2 - 2 * stats.norm.cdf(1.959964 / 0.5), rel=1e-6)  # 8.9e-5
    assert boundaries([1.0]) == [pytest.approx(1.959964, abs=1e-5)]
    # the first look spends exactly alpha(t1): its boundary is z_{alpha/2} / sqrt(t1)
    assert boundaries([0.5, 1.0])[0] == pytest.approx(1.959964 / math.sqrt(0.5), abs=1e-5)


@pytest.mark.parametrize("fractions", [[0.3, 1.0], [0.2, 0.6, 1.0], [0.5, 0.75, 0.9]])
def test_crossing_probabilities_match_a_brownian_motion_simulation(fractions):
    """Every look spends alpha(t_k) - alpha(t_k-1) under H0, and the total under a drift matches paths drawn
    directly (200,000 paths of the score process; 4 standard errors)."""
    b = boundaries(fractions)
    probs = crossing(fractions, b)
    want = np.diff([0.0] + [spent(t) for t in fractions])
    assert probs == pytest.approx(want, abs=2e-4)
    rng = np.random.default_rng(0)
    for drift in (0.0, 2.5):
        steps = np.diff([0.0] + fractions)
        s = np.cumsum(rng.normal(drift * steps, np.sqrt(steps), size=(200_000, len(steps))), axis=1)
        z = s / np.sqrt(fractions)
        crossed = np.abs(z) >= b
        first = np.where(crossed.any(1), crossed.argmax(1), -1)
        mc = [(first == k).mean() for k in range(len(fractions))]
        got = crossing(fractions, b, drift)
        for g, m in zip(got, mc):
            assert abs(g - m) <= 4 * math.sqrt(max(m, 1e-4) * (1 - m) / 200_000) + 3e-4, (drift, got, mc)


def test_the_t_boundary_carries_the_nominal_level():
    assert t_boundary(1.959964, 10_000) == pytest.approx(1.96, abs=1e-3)
    assert t_boundary(1.959964, 5) == pytest.approx(stats.t.ppf(0.975, 4), abs=1e-4)  # 2.776


@pytest.mark.parametrize("sd", [0.3, 0.55, 1.0, 2.0])
def test_the_planned_maximum_is_the_pilot_plus_the_fixed_n_t_test(sd):
    """The pilot plans and the new seeds test, so max n is the pilot's n plus the fixed-n t-test's n (noncentral
    t) at the design's alpha; at alpha / 9 (Holm's first step over 9 tests) it needs more."""
    assert max_seeds(5, 0.2, sd) == 5 + seeds_needed(0.2, sd)
    holm = 3 + seeds_needed(0.2, sd, alpha=0.05 / 9)
    assert max_seeds(3, 0.2, sd, alpha=0.05 / 9) == holm > 3 + seeds_needed(0.2, sd)


def test_the_sd_limit_is_the_chi_square_upper_limit():
    assert sd_limit(1.0, 5, 0.8) == pytest.approx(math.sqrt(4 / stats.chi2.ppf(0.2, 4)), rel=1e-9)
    assert sd_limit(1.0, 5, 0.8) > 1.0


def test_a_sequence_stops_at_its_first_crossing_with_hand_computed_statistics():
    values = [1.0, 1.2, 0.8, 1.1, 0.9, 1.0, 1.05, 0.95]
    r = evaluate(values, [4, 8], max_n=8)
    x = np.asarray(values[:4])
    t4 = x.mean() / (x.std(ddof=1) / 2)
    assert r["looks"][0]["t"] == pytest.approx(t4)  # 18.3 at n 4 beyond its boundary
    assert r["looks"][0]["t_bound"] == pytest.approx(t_boundary(boundaries([0.5, 1.0])[0], 4))
    assert r["decision"] == "holds" and r["stopped_at"] == 4 and len(r["looks"]) == 1
    assert 0 < r["p"] <= spent(0.5)
    assert evaluate([-v for v in values], [4, 8], 8)["decision"] == "reversed"
    noise = [0.3, -0.2, 0.1, -0.4, 0.2, 0.1]
    assert evaluate(noise, [3, 6], 12)["decision"] == "open"
    assert evaluate(noise, [3, 6], 6)["decision"] == "done"


def simulate(rng, mu: float, sd: float, effect: float, n0: int, interim: bool, runs: int) -> tuple[float, float]:
    """(rejection rate, planned power) over `runs` paired experiments settled as make settle and the ledger do:
    the pilot's design (its SD's 80 % upper limit -> max n), the pilot planning only (its seeds are the first
    n0, left out of the sequence), optionally an interim look halfway through the new seeds (a second settle
    continuing the sequence), the final look at max n."""
    rejected, planned = 0, []
    for _ in range(runs):
        pilot = rng.normal(mu, sd, n0)
        d = design(pilot, effect)
        max_n = d["max_n"]
        values = np.concatenate([pilot, rng.normal(mu, sd, max_n - n0)])
        looks = [n0, (n0 + max_n) // 2, max_n] if interim and max_n >= n0 + 4 else [n0, max_n]
        rejected += evaluate(values, looks, max_n, p_value=False, pilot=d["pilot"])["decision"] in ("holds",
                                                                                                 "reversed")
        planned.append(d["power"])
    return rejected / runs, float(np.mean(planned))


@pytest.mark.slow
@pytest.mark.parametrize("interim", [False, True])
def test_the_procedure_keeps_its_error_rate_under_the_null(interim):
    """2,000 experiments at the CPU scale's pilot (n 5, SD 0.55 points: DSA-MoE - SA-MLP) and its published effect
    0.2 points: the false-positive rate stays at 0.05 within Monte-Carlo error (one-sided 99 %). Re-testing the
    pooled seeds at 0.05 after topping up is what this replaces (0.08-0.10 in the issue's simulation)."""
    rate, _ = simulate(np.random.default_rng(1 + interim), 0.0, 0.55, 0.2, 5, interim, 2000)
    assert rate <= 0.05 + 2.33 * math.sqrt(0.05 * 0.95 / 2000), rate


@pytest.mark.slow
def test_the_error_rate_holds_at_any_pilot():
    """The case that broke the old design (max n from the pilot's SD, the pilot's seeds in the test: 0.0665 +-
    0.0012 at a pilot of 5 with the effect 1.2 SD): pilots of 3, 4 and 5 seeds, planned effects of 0.5, 1 and 2
    SD, an interim look halfway, 1,000 null experiments each (9,000 in all). The pooled false-positive rate is at
    most 0.055 (its Monte-Carlo SE, about 0.0023, is printed), and no scenario is above 0.05 by more than 2.33 of
    its own SE."""
    rng = np.random.default_rng(11)
    rates = {}
    for n0 in (3, 4, 5):
        for effect in (0.5, 1.0, 2.0):
            rates[(n0, effect)], _ = simulate(rng, 0.0, 1.0, effect, n0, True, 1000)
    pooled = float(np.mean(list(rates.values())))
    se = math.sqrt(pooled * (1 - pooled) / (1000 * len(rates)))
    print(f"false-positive rate {pooled:.4f} (Monte-Carlo SE {se:.4f}); by (pilot n, effect / SD): {rates}")
    assert pooled <= 0.055, rates
    worst = max(rates.values())
    assert worst <= 0.05 + 2.33 * math.sqrt(0.05 * 0.95 / 1000), rates


@pytest.mark.slow
def test_the_procedure_reaches_its_planned_power_at_the_published_effect():
    """The same procedure with the published effect true: power at least the planned 0.80 within Monte-Carlo
    error (the max n from the SD's upper limit makes it higher on average)."""
    rate, planned = simulate(np.random.default_rng(3), 0.2, 0.55, 0.2, 5, False, 2000)
    assert rate >= planned - 2.33 * math.sqrt(planned * (1 - planned) / 2000), rate


def test_naive_topping_up_inflates_the_error_rate_which_the_design_avoids():
    """The control: the same null experiments, judged by a fixed 0.05 t-test at the pilot and again on the pooled
    seeds, reject more often than 0.05 (the failure the design exists for), so the simulation can see it."""
    rng = np.random.default_rng(4)
    rejected = 0
    for _ in range(2000):
        pilot = rng.normal(0, 0.55, 5)
        first = stats.ttest_1samp(pilot, 0).pvalue < 0.05
        pooled = np.concatenate([pilot, rng.normal(0, 0.55, 56)])
        rejected += first or stats.ttest_1samp(pooled, 0).pvalue < 0.05
    assert rejected / 2000 > 0.05 + 2.33 * math.sqrt(0.05 * 0.95 / 2000)
