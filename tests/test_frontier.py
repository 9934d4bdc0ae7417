"""Frontier maths: monotone envelope, log-cost interpolation, shared grid, bands, inverse cost, budget choice."""
import math

import numpy as np
import pytest

from itervision.evaluation.early_exit import choose_for_budget, choose_for_target, exact_sweep, sweep
from itervision.stats import cost_to_reach, interpolate_log_cost, mean_band, monotone_envelope, shared_log_grid


def test_monotone_envelope_drops_dominated_points_and_cost_ties():
    c, a = monotone_envelope([4, 1, 2, 2, 3, 8], [0.80, 0.60, 0.70, 0.72, 0.69, 0.79])
    assert c.tolist() == [1, 2, 4] and a.tolist() == [0.60, 0.72, 0.80]
    c, a = monotone_envelope([1, 2, float("nan")], [0.5, float("nan"), 0.9])
    assert c.tolist() == [1] and a.tolist() == [0.5]


def test_interpolation_is_linear_in_log_cost_and_never_extrapolates():
    costs, accs = [1.0, 4.0], [0.6, 0.8]
    out = interpolate_log_cost(costs, accs, [0.5, 1.0, 2.0, 4.0, 5.0])
    # cost 2 is halfway between 1 and 4 in log space
    assert math.isnan(out[0]) and math.isnan(out[4])
    assert out[1:4].tolist() == pytest.approx([0.6, 0.7, 0.8])


def test_matched_cost_interpolation_hand_case():
    # a sweep with a dominated point; accuracy at budget 0.3: between (0.2, 0.78) and (0.5, 0.83)
    costs = [0.2, 0.25, 0.5, 1.0]
    accs = [0.78, 0.77, 0.83, 0.845]
    expected = 0.78 + (math.log(0.3) - math.log(0.2)) / (math.log(0.5) - math.log(0.2)) * (0.83 - 0.78)
    assert interpolate_log_cost(costs, accs, [0.3])[0] == pytest.approx(expected)


def test_inverse_cost_hand_cases():
    costs, accs = [1.0, 2.0, 8.0], [0.5, 0.7, 0.9]
    assert cost_to_reach(costs, accs, 0.5) == pytest.approx(1.0)
    assert cost_to_reach(costs, accs, 0.4) == pytest.approx(1.0)  # already reached at the cheapest point
    # 0.8 is halfway between 0.7 (cost 2) and 0.9 (cost 8) -> geometric mean 4
    assert cost_to_reach(costs, accs, 0.8) == pytest.approx(4.0)
    assert math.isnan(cost_to_reach(costs, accs, 0.95))
    # inverse of the forward interpolation
    for target in (0.55, 0.66, 0.88):
        c = cost_to_reach(costs, accs, target)
        assert interpolate_log_cost(costs, accs, [c])[0] == pytest.approx(target)


def test_shared_grid_and_pointwise_band():
    curves = [([1, 10], [0.5, 0.9]), ([2, 20], [0.6, 0.8]), ([1.5, 8], [0.55, 0.85])]
    grid = shared_log_grid(curves, points=5)
    assert grid[0] == pytest.approx(2) and grid[-1] == pytest.approx(8)
    assert np.allclose(np.diff(np.log(grid)), np.log(4) / 4)
    band = mean_band(curves, grid)
    vals = np.array([interpolate_log_cost(c, a, grid) for c, a in curves])
    assert band["mean"] == pytest.approx(vals.mean(0).tolist())
    assert all(n == 3 for n in band["n"])
    assert shared_log_grid([([1, 2], [0.1, 0.2]), ([3, 4], [0.1, 0.2])]).size == 0


def test_threshold_choice_on_calibration_rows():
    rows = {"threshold": np.array([0.0, 0.5, 0.8, 0.9, 1.0]), "cost": np.array([1.0, 1.5, 2.0, 2.5, 3.0]),
            "accuracy": np.array([0.70, 0.78, 0.80, 0.80, 0.82])}
    assert choose_for_budget(rows, 2.6) == 2  # best accuracy within budget, cheapest on ties
    assert choose_for_budget(rows, 0.5) is None
    assert choose_for_target(rows, 0.79) == 2
    assert choose_for_target(rows, 0.9) is None


def test_exact_sweep_equals_applying_every_threshold_by_brute_force():
    """Every distinct confidence (and +inf) is an operating point; accuracy, mean cost and the exit histogram at
    each equal the first-confident-exit rule applied directly."""
    rng = np.random.default_rng(0)
    n, exits = 300, 3
    probs = np.round(rng.uniform(0.2, 1.0, (n, exits)), 2)  # rounded: many ties between images and exits
    label = rng.integers(0, 5, n)
    pred = np.where(rng.uniform(size=(n, exits)) < probs, label[:, None], (label[:, None] + 1) % 5)
    costs = [1.0, 2.5, 4.0]
    sw = exact_sweep(pred, probs, label, costs)
    assert np.isinf(sw["threshold"][-1]) and np.all(np.diff(sw["threshold"]) > 0)
    assert set(sw["threshold"][:-1]) == set(np.unique(probs[:, :-1]))
    brute = sweep(pred, probs, label, costs, thresholds=sw["threshold"])
    np.testing.assert_allclose(sw["accuracy"], [r["accuracy"] for r in brute], atol=1e-12)
    np.testing.assert_allclose(sw["cost"], [r["mean_cost"] for r in brute], atol=1e-12)
    assert sw["histogram"].tolist() == [r["exit_histogram"] for r in brute]
    assert sw["histogram"][-1].tolist() == [0, 0, n]  # +inf: every image runs every exit
    # no threshold between two candidates changes anything
    mid = (sw["threshold"][3] + sw["threshold"][4]) / 2
    assert sweep(pred, probs, label, costs, thresholds=[mid])[0]["accuracy"] == sw["accuracy"][4]


def test_the_exact_search_spends_a_budget_up_to_its_limit():
    """A coarse grid leaves budget unspent; the exact search has operating points up to the limit, and its choice is
    at least as accurate as any grid point within the budget."""
    rng = np.random.default_rng(1)
    probs = rng.uniform(0.3, 1.0, (500, 3))
    label = np.zeros(500, int)
    pred = np.where(rng.uniform(size=(500, 3)) < [0.6, 0.75, 0.9], 0, 1)
    sw = exact_sweep(pred, probs, label, [1.0, 2.0, 3.0])
    budget = 1.8
    i = choose_for_budget(sw, budget)
    coarse = sweep(pred, probs, label, [1.0, 2.0, 3.0], thresholds=np.linspace(0, 1, 17))
    feasible = [r for r in coarse if r["mean_cost"] <= budget]
    assert sw["cost"][i] <= budget and sw["accuracy"][i] >= max(r["accuracy"] for r in feasible)
    spent = sw["cost"][sw["cost"] <= budget].max()
    assert max(r["mean_cost"] for r in feasible) < spent and spent > budget - 2.0 / 500  # one image's step


def test_oracle_and_overthinking_against_hand_counts():
    from itervision.evaluation.early_exit import oracle, overthinking

    label = np.array([0, 1, 2, 3])
    pred = np.array([[0, 0, 0],    # right from the first exit
                     [9, 1, 9],    # right at exit 2 only: overthinks
                     [9, 9, 9],    # never right
                     [3, 9, 3]])   # right at 1, wrong at 2, right at the last: not overthinking
    o = oracle(pred, label, [1.0, 2.0, 4.0])
    assert o["accuracy"] == 0.75 and o["cost"] == pytest.approx((1 + 2 + 4 + 1) / 4)
    assert overthinking(pred, label) == 0.25


def test_area_under_the_frontier_is_the_mean_accuracy_over_log_cost():
    from itervision.evaluation.early_exit import area_under_frontier

    costs, acc = [1.0, 4.0], [0.5, 0.9]  # linear in log cost: the mean over [1, 4] is the midpoint
    assert area_under_frontier(costs, acc, 1.0, 4.0) == pytest.approx(0.7)
    assert area_under_frontier(costs, acc, 2.0, 4.0) == pytest.approx((0.7 + 0.9) / 2)
    assert math.isnan(area_under_frontier(costs, acc, 0.5, 4.0))  # never extrapolated


def test_the_honest_frontier_scores_calibs_operating_points_on_test():
    """calib_chosen_points: each threshold of the calibration split's envelope, scored on test, equals applying
    that threshold to the test split by brute force; the area over its points stays below the paper-style one
    (the test split's own envelope), which chooses on the data it scores."""
    from itervision.evaluation.early_exit import (apply_threshold, area_under_frontier, area_under_points,
                                                  calib_chosen_points, exact_sweep)
    from itervision.stats.frontier import monotone_envelope

    rng = np.random.default_rng(3)
    costs = [1.0, 2.0, 4.0]

    def split(n):
        label = rng.integers(0, 5, n)
        probs = np.sort(rng.random((n, 3)), axis=1)
        pred = np.where(rng.random((n, 3)) < probs, label[:, None], (label[:, None] + 1) % 5)
        return pred, probs, label

    calib, test = split(300), split(500)
    cal, tst = exact_sweep(*calib, costs), exact_sweep(*test, costs)
    c, a = calib_chosen_points(cal, tst)
    env_c, _ = monotone_envelope(cal["cost"], cal["accuracy"])
    assert len(c) == len(env_c)
    for th in cal["threshold"][np.isin(cal["cost"], env_c)]:
        brute = apply_threshold(*test, costs, th)
        assert np.any(np.isclose(c, brute["cost"]) & np.isclose(a, brute["accuracy"]))
    low, high = 1.5, 3.5
    honest, paper = area_under_points(c, a, low, high), area_under_frontier(tst["cost"], tst["accuracy"], low, high)
    assert np.isfinite(honest) and honest <= paper + 1e-12
    assert np.isnan(area_under_points(c, a, 0.5, 3.5))  # never extrapolated below the cheapest point
