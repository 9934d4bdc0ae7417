"""Confidence-threshold early exit over per-exit predictions (no model re-run; NumPy only, so the aggregate
stage reads it without torch).

An image stops at the first exit whose top softmax probability reaches the threshold (the last exit if none
does) and pays the cumulative cost of that exit.
"""
from __future__ import annotations

import numpy as np

DEFAULT_THRESHOLDS = tuple(np.round(np.concatenate([np.linspace(0.0, 0.9, 10), [0.95, 0.97, 0.98, 0.99, 0.995,
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


def sweep(pred: np.ndarray, probs: np.ndarray, label: np.ndarray, exit_costs, thresholds=DEFAULT_THRESHOLDS):
    """Accuracy and mean cost per image for each threshold, with the exit histogram."""
    costs = np.asarray(exit_costs, dtype=np.float64)
    rows = []
    for th in thresholds:
        p, idx = early_exit(pred, probs, float(th))
        rows.append({"threshold": float(th), "accuracy": float((p == label).mean()),
                     "mean_cost": float(costs[idx].mean()),
                     "exit_histogram": np.bincount(idx, minlength=len(costs)).tolist()})
    return rows
