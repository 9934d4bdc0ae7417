"""Statistics against scipy and hand-computed values, degenerate inputs included."""
import itertools
import math

import numpy as np
import pytest
from scipy import stats

from itervision.stats import holm, holm_fill, mcnemar, mean_ci, paired_difference, sign_flip_p


def test_mean_ci_matches_scipy_t_interval():
    x = [0.81, 0.83, 0.80, 0.84, 0.82]
    r = mean_ci(x)
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=stats.sem(x))
    assert r["mean"] == pytest.approx(np.mean(x))
    assert r["half_width"] == pytest.approx((hi - lo) / 2)
    assert r["n"] == 5


def test_mean_ci_degenerate_inputs():
    assert mean_ci([0.7, 0.7, 0.7]) == {"mean": pytest.approx(0.7), "half_width": 0.0, "sd": 0.0, "n": 3}
    one = mean_ci([0.5])
    assert one["mean"] == 0.5 and one["n"] == 1 and math.isnan(one["half_width"])
    nan = mean_ci([0.5, float("nan"), 0.7])
    assert nan["n"] == 2 and nan["mean"] == pytest.approx(0.6)
    assert mean_ci([])["n"] == 0 and math.isnan(mean_ci([float("nan")])["mean"])


def test_paired_difference_matches_scipy_ttest_rel():
    a = np.array([0.82, 0.85, 0.80, 0.84, 0.83, 0.86])
    b = np.array([0.80, 0.84, 0.81, 0.82, 0.80, 0.83])
    r = paired_difference(a, b)
    res = stats.ttest_rel(a, b)
    ci = res.confidence_interval(0.95)
    assert r["p"] == pytest.approx(res.pvalue)
    assert r["mean"] == pytest.approx((a - b).mean())
    assert r["half_width"] == pytest.approx((ci.high - ci.low) / 2)
    assert r["wins"] == 5 and r["ties"] == 0 and r["n"] == 6
    # exact sign-flip p at n = 6, against scipy's exact permutation test
    perm = stats.permutation_test((a - b,), np.mean, permutation_type="samples", n_resamples=np.inf,
                                  alternative="two-sided")
    assert r["p_sign_flip"] == pytest.approx(perm.pvalue)


def test_sign_flip_only_from_six_seeds_and_its_floor():
    assert paired_difference([1, 2, 3, 4, 5], [0, 0, 0, 0, 0])["p_sign_flip"] is None
    assert sign_flip_p([1, 2, 3, 4, 5]) == pytest.approx(2 / 32)  # n = 5 can never reach 0.05
    assert sign_flip_p([1, 1, 1, 1, 1, 1]) == pytest.approx(2 / 64)


def test_paired_difference_degenerate_inputs():
    same = paired_difference([0.8, 0.8, 0.8], [0.8, 0.8, 0.8])
    assert same["mean"] == 0 and same["p"] == 1.0 and same["ties"] == 3
    const = paired_difference([0.9, 0.8, 0.7], [0.875, 0.775, 0.675])  # differences equal up to rounding
    assert const["half_width"] == 0.0 and math.isnan(const["p"]) and const["wins"] == 3
    one = paired_difference([0.9], [0.8])
    assert one["n"] == 1 and math.isnan(one["p"]) and math.isnan(one["half_width"])
    nan = paired_difference([0.9, float("nan"), 0.7, 0.8], [0.8, 0.8, 0.75, 0.7])
    assert nan["n"] == 3
    with pytest.raises(ValueError, match="differ in length"):
        paired_difference([1, 2], [1])


def test_holm_against_hand_computed_values():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> running max 0.02, 0.03, 0.06, 0.06
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    out = holm([0.01, float("nan"), 0.02])
    assert out[0] == pytest.approx(0.02) and math.isnan(out[1]) and out[2] == pytest.approx(0.02)
    assert holm([]) == []


def test_mcnemar_exact_against_binomtest():
    a = np.array([1, 1, 1, 0, 1, 0, 1, 1, 0, 1], bool)
    b = np.array([1, 0, 0, 0, 1, 1, 0, 0, 0, 1], bool)
    r = mcnemar(a, b)
    assert (r["b"], r["c"]) == (4, 1)
    assert r["p"] == pytest.approx(stats.binomtest(1, 5, 0.5).pvalue)
    assert mcnemar(a, a) == {"b": 0, "c": 0, "p": 1.0}


def test_sign_flip_enumerates_every_pattern():
    d = np.array([0.3, -0.1, 0.2, 0.4, 0.1, 0.05, -0.02])
    obs = abs(d.mean())
    hits = sum(abs((np.array(s) * d).mean()) >= obs - 1e-15 for s in itertools.product((1, -1), repeat=len(d)))
    assert sign_flip_p(d) == pytest.approx(hits / 2 ** len(d))


def test_sign_flip_is_monte_carlo_above_16_seeds_and_stays_within_memory():
    rng = np.random.default_rng(0)
    d = rng.normal(0.3, 1.0, 30)  # exact enumeration would need 2^30 rows
    p = sign_flip_p(d)
    assert p == sign_flip_p(d)  # fixed seed: reproducible
    exact_t = stats.ttest_1samp(d, 0).pvalue
    assert 0 < p < 1 and abs(p - exact_t) < 0.05  # agrees with the t-test to within Monte Carlo and model error
    same = np.ones(20)
    assert sign_flip_p(same) == pytest.approx(1 / (2 ** 16 + 1), rel=0.5)  # only the observed pattern and its mirror
    # at n = 16 still exact: equals the enumeration
    d16 = rng.normal(0.2, 1.0, 16)
    obs = abs(d16.mean())
    signs = np.array(list(itertools.product((1, -1), repeat=16)))
    assert sign_flip_p(d16) == pytest.approx(np.mean(np.abs(signs @ d16 / 16) >= obs - 1e-12))


def test_holm_fill_adjusts_a_family_in_place():
    family = [{"p": 0.01}, {"p": 0.04}, {"p": 0.03}, {"p": float("nan")}]
    holm_fill(family)
    assert [c["p_holm"] for c in family][:3] == pytest.approx([0.03, 0.06, 0.06]) and math.isnan(family[3]["p_holm"])


def test_probability_of_improvement_against_hand_counts():
    from itervision.stats import probability_of_improvement

    # 3 x 3 pairs (a, b): a=1 beats 0, ties 1, loses to 2; a=2 beats 1 and 0, ties 2; a=3 beats all three
    # -> 6 wins, 2 ties, 1 loss: (6 + 0.5 * 2) / 9
    assert probability_of_improvement([1, 2, 3], [1, 2, 0]) == pytest.approx((6 + 1) / 9)
    assert probability_of_improvement([5, 6], [1, 2]) == 1.0 and probability_of_improvement([1], [1]) == 0.5
    assert np.isnan(probability_of_improvement([], [1]))


def test_bootstrap_intervals_are_scipys_and_deterministic():
    from scipy import stats

    from itervision.stats import bootstrap_mean_ci, paired_bootstrap, probability_of_improvement_ci

    v = [0.2, -0.1, 0.5, 0.3, 0.05]
    a, b = bootstrap_mean_ci(v, seed=3), bootstrap_mean_ci(v, seed=3)
    assert a == b and a["method"] == "BCa"
    ref = stats.bootstrap((np.array(v),), np.mean, n_resamples=10_000, method="BCa",
                          rng=np.random.default_rng(3)).confidence_interval
    assert (a["low"], a["high"]) == pytest.approx((ref.low, ref.high))
    assert bootstrap_mean_ci([0.3, 0.3, 0.3])["low"] == 0.3  # BCa is undefined on equal values: no NaN
    poi = probability_of_improvement_ci([1.0, 2, 3, 4], [0.5, 1.5, 2.5, 3.5], seed=1)
    assert poi["p_improvement"] == pytest.approx(10 / 16) and 0 <= poi["low"] <= poi["p_improvement"] <= poi["high"]
    assert poi == probability_of_improvement_ci([1.0, 2, 3, 4], [0.5, 1.5, 2.5, 3.5], seed=1)
    pb = paired_bootstrap([0.8, 0.7, np.nan, 0.9], [0.7, 0.7, 0.6, 0.8])
    assert pb["n"] == 3 and pb["diff_mean"] == pytest.approx(0.2 / 3)


def test_one_sample_matches_scipy():
    from scipy import stats

    from itervision.stats import one_sample

    v = [0.1, 0.3, 0.2, 0.15]
    r = one_sample(v, null=0.05)
    assert r["p"] == pytest.approx(stats.ttest_1samp(v, 0.05).pvalue)
    assert r["mean"] == pytest.approx(0.1875) and r["per_seed"] == v


def test_seeds_needed_and_power_against_table_values():
    """Paired-t power at d = 1, alpha 0.05 (statistics notes): 0.18 at n = 3, 0.40 at 5, 0.80 at 10; so 10 seeds
    detect an effect of one standard deviation at 80 % power."""
    from itervision.stats import paired_t_power, seeds_needed

    assert paired_t_power(1.0, 3) == pytest.approx(0.18, abs=0.01)
    assert paired_t_power(1.0, 5) == pytest.approx(0.40, abs=0.01)
    assert paired_t_power(1.0, 10) == pytest.approx(0.80, abs=0.01)
    assert seeds_needed(1.0, 1.0) == 10 and seeds_needed(-2.0, 2.0) == 10
    assert seeds_needed(0.5, 1.0) == 34  # d = 0.5: the textbook 34 pairs
    assert seeds_needed(1.0, 0.0) is None and seeds_needed(0.0, 1.0) is None


def test_expected_calibration_error_against_a_hand_count():
    from itervision.stats import expected_calibration_error

    # two bins used: (0.8, 0.8667] holds 0.85 x 2 (1 right), (0.9333, 1] holds 0.95 x 2 (2 right)
    conf, right = [0.85, 0.85, 0.95, 0.95], [1, 0, 1, 1]
    assert expected_calibration_error(conf, right) == pytest.approx(0.5 * abs(0.5 - 0.85) + 0.5 * abs(1 - 0.95))
    assert expected_calibration_error([1.0, 1.0], [1, 1]) == 0.0
