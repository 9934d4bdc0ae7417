"""Expected calibration error of one exit: how far the top softmax probability is from the accuracy it
claims, averaged over confidence bins weighted by their share of the images (Guo et al. 2017's ECE with
equal-width bins, as Zero-Time-Waste reports per head)."""
from __future__ import annotations

import numpy as np

BINS = 15


def expected_calibration_error(confidence, correct, bins: int = BINS) -> float:
    """sum_b |B_b| / N * |accuracy(B_b) - mean confidence(B_b)| over equal-width bins of (0, 1]."""
    conf = np.asarray(confidence, dtype=np.float64)
    right = np.asarray(correct, dtype=np.float64)
    if not len(conf):
        return float("nan")
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.searchsorted(edges, conf, side="left") - 1, 0, bins - 1)  # (lo, hi]; 0 to the first bin
    ece = 0.0
    for b in range(bins):
        inside = which == b
        if inside.any():
            ece += inside.mean() * abs(right[inside].mean() - conf[inside].mean())
    return float(ece)
