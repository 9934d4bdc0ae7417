"""Confidence-threshold early exit over per-exit predictions (no model re-run; NumPy only, so the aggregate
stage reads it without torch).

An image stops at the first exit whose top softmax probability reaches the threshold (the last exit if none
does) and pays the cumulative cost of that exit.

`exact_sweep` evaluates every threshold that changes anything: accuracy, mean cost and the exit histogram only
change where the threshold crosses one of the split's own confidences, so the distinct confidences of the
non-final exits (and +inf: every image to the last exit) are the complete set of operating points. A threshold
chosen from this set for a compute budget spends the budget up to its limit; a fixed grid leaves budget unspent
between its points.
"""
from __future__ import annotations

import numpy as np

# a readable grid for the "rounds used per threshold" figure only; choices use the exact sweep
DISPLAY_THRESHOLDS = tuple(np.round(np.concatenate([np.linspace(0.0, 0.9, 10), [0.95, 0.97, 0.98, 0.99, 0.995,
                                                                                0.999, 1.01]]), 4))


def exit_index(probs: np.ndarray, threshold: float) -> np.ndarray:
    """probs (N, E) top softmax probability per exit -> index of the exit each image stops at."""
    reached = np.asarray(probs) >= threshold
    reached[:, -1] = True
    return reached.argmax(1)


def early_exit(pred: np.ndarray, probs: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """(predictions, exit index) of each image for one threshold."""
    idx = exit_index(probs, threshold)
    return pred[np.arange(len(idx)), idx], idx


def early_exit_model(model, img, threshold: float):
    """Run a model and stop each image at its first confident exit: (predictions, exit index)."""
    import torch

    with torch.no_grad():
        logits = torch.stack(model(img)["logits"], 1)  # B, E, C
    top, pred = logits.softmax(-1).max(-1)
    idx = torch.from_numpy(exit_index(top.numpy(), threshold))
    return pred[torch.arange(len(idx)), idx], idx


def sweep(pred: np.ndarray, probs: np.ndarray, label: np.ndarray, exit_costs, thresholds=DISPLAY_THRESHOLDS):
    """Accuracy and mean cost per image for each given threshold, with the exit histogram."""
    costs = np.asarray(exit_costs, dtype=np.float64)
    rows = []
    for th in thresholds:
        p, idx = early_exit(pred, probs, float(th))
        rows.append({"threshold": float(th), "accuracy": float((p == label).mean()),
                     "mean_cost": float(costs[idx].mean()),
                     "exit_histogram": np.bincount(idx, minlength=len(costs)).tolist()})
    return rows


def exact_sweep(pred: np.ndarray, probs: np.ndarray, label: np.ndarray, exit_costs) -> dict:
    """Every operating point of the threshold rule, exactly: {"threshold" (T,), "accuracy" (T,), "cost" (T,),
    "histogram" (T, E)}, thresholds ascending, the last +inf.

    Image i leaves at exit e < E-1 for thresholds t in (max(probs[i, :e]), probs[i, e]] and at the last exit for
    t > max(probs[i, :E-1]); those intervals are added with difference arrays over the sorted candidates, so the
    cost is O(N E log T) instead of one pass over the images per threshold."""
    probs = np.asarray(probs, dtype=np.float64)
    n, exits = probs.shape
    costs = np.asarray(exit_costs, dtype=np.float64)
    correct = (np.asarray(pred) == np.asarray(label)[:, None]).astype(np.float64)
    candidates = np.append(np.unique(probs[:, :-1]), np.inf)
    T = len(candidates)
    hist = np.zeros((T + 1, exits))
    right = np.zeros((T + 1, exits))  # correct predictions of the images at each exit
    earlier = np.full(n, -np.inf)  # highest confidence of the exits before e
    for e in range(exits):
        if e < exits - 1:
            lo = np.searchsorted(candidates, earlier, side="right")
            hi = np.searchsorted(candidates, probs[:, e], side="right")  # one past the index of probs[i, e]
            live = hi > lo
        else:
            lo = np.searchsorted(candidates, earlier, side="right")
            hi, live = np.full(n, T), np.ones(n, bool)
        np.add.at(hist[:, e], lo[live], 1)
        np.add.at(hist[:, e], hi[live], -1)
        np.add.at(right[:, e], lo[live], correct[live, e])
        np.add.at(right[:, e], hi[live], -correct[live, e])
        if e < exits - 1:
            earlier = np.maximum(earlier, probs[:, e])
    hist, right = np.cumsum(hist, 0)[:T], np.cumsum(right, 0)[:T]
    return {"threshold": candidates, "accuracy": right.sum(1) / n, "cost": hist @ costs / n,
            "histogram": hist.round().astype(np.int64)}


def choose_for_budget(sw: dict, budget_cost: float) -> int | None:
    """Index of the operating point with the best accuracy at mean cost <= budget (the cheapest of ties); None
    when even the cheapest point costs more."""
    ok = np.flatnonzero(sw["cost"] <= budget_cost * (1 + 1e-9))
    if not len(ok):
        return None
    best = sw["accuracy"][ok].max()
    ties = ok[sw["accuracy"][ok] >= best - 1e-12]
    return int(ties[np.argmin(sw["cost"][ties])])


def choose_for_target(sw: dict, target: float) -> int | None:
    """Index of the cheapest operating point whose accuracy reaches `target`; None if none does."""
    ok = np.flatnonzero(sw["accuracy"] >= target - 1e-12)
    return int(ok[np.argmin(sw["cost"][ok])]) if len(ok) else None


def apply_threshold(pred, probs, label, exit_costs, threshold: float) -> dict:
    """Accuracy, mean cost and exit histogram of one threshold on a split."""
    p, idx = early_exit(pred, probs, threshold)
    costs = np.asarray(exit_costs, dtype=np.float64)
    return {"accuracy": float((p == label).mean()), "cost": float(costs[idx].mean()),
            "histogram": np.bincount(idx, minlength=len(costs)).tolist()}


def oracle(pred: np.ndarray, label: np.ndarray, exit_costs) -> dict:
    """The upper bound of any exit policy: an image counts as right when some exit is right, and pays for its
    earliest right exit (the last exit when none is right)."""
    correct = np.asarray(pred) == np.asarray(label)[:, None]
    costs = np.asarray(exit_costs, dtype=np.float64)
    any_right = correct.any(1)
    first_right = np.where(any_right, correct.argmax(1), correct.shape[1] - 1)
    return {"accuracy": float(any_right.mean()), "cost": float(costs[first_right].mean())}


def overthinking(pred: np.ndarray, label: np.ndarray) -> float:
    """Share of images right at some earlier exit and wrong at the last one (Shallow-Deep Networks)."""
    correct = np.asarray(pred) == np.asarray(label)[:, None]
    if correct.shape[1] < 2:
        return 0.0
    return float((correct[:, :-1].any(1) & ~correct[:, -1]).mean())


def calib_chosen_points(calib_sweep: dict, test_sweep: dict) -> tuple[np.ndarray, np.ndarray]:
    """The honest frontier on test: the thresholds of the calibration split's monotone envelope (its operating
    points, chosen on calib), each scored on test. Returns (test costs, test accuracies), by ascending cost; the
    test accuracies are not enveloped again (that would choose on test)."""
    order = np.argsort(calib_sweep["cost"], kind="stable")
    acc = np.asarray(calib_sweep["accuracy"])[order]
    keep = order[acc > np.concatenate([[-np.inf], np.maximum.accumulate(acc)[:-1]])]
    # the test sweep's point j covers the thresholds in (threshold[j-1], threshold[j]]
    j = np.minimum(np.searchsorted(test_sweep["threshold"], calib_sweep["threshold"][keep], side="left"),
                   len(test_sweep["threshold"]) - 1)
    cost, accuracy = np.asarray(test_sweep["cost"])[j], np.asarray(test_sweep["accuracy"])[j]
    o = np.argsort(cost, kind="stable")
    return cost[o], accuracy[o]


def area_under_points(costs, accuracies, low: float, high: float) -> float:
    """Mean accuracy over [low, high] in log cost of the points as they are (linear between them, no envelope);
    NaN when they do not cover the range."""
    c, a = np.asarray(costs, dtype=np.float64), np.asarray(accuracies, dtype=np.float64)
    if not (np.isfinite(low) and np.isfinite(high)) or high <= low or not len(c) or c[0] > low * (1 + 1e-9) \
            or c[-1] < high * (1 - 1e-9):
        return float("nan")
    x = np.log(np.exp(np.linspace(np.log(low), np.log(high), 200)))
    acc = np.interp(x, np.log(c), a)
    return float(np.sum((acc[1:] + acc[:-1]) / 2 * np.diff(x)) / (x[-1] - x[0]))


def area_under_frontier(costs, accuracies, low: float, high: float) -> float:
    """Mean accuracy of the monotone envelope over [low, high] in log cost (the area under the accuracy-vs-cost
    curve divided by the width of the range): one number for a whole frontier, comparable between seeds that
    share the range; NaN when the envelope does not cover it."""
    from itervision.stats.frontier import interpolate_log_cost

    if not (np.isfinite(low) and np.isfinite(high)) or high <= low:
        return float("nan")
    grid = np.exp(np.linspace(np.log(low), np.log(high), 200))
    acc = interpolate_log_cost(costs, accuracies, grid)
    if not np.all(np.isfinite(acc)):
        return float("nan")
    x = np.log(grid)
    return float(np.sum((acc[1:] + acc[:-1]) / 2 * np.diff(x)) / (x[-1] - x[0]))
