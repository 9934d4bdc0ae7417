"""Statistics across seeds (see ../shared/notes/statistics.md): t-intervals, paired tests, Holm, frontiers."""
from itervision.stats.frontier import (cost_to_reach, interpolate_log_cost, mean_band, monotone_envelope,
                                       shared_log_grid)
from itervision.stats.inference import holm, holm_fill, mcnemar, mean_ci, paired_difference, sign_flip_p

__all__ = ["mean_ci", "paired_difference", "holm", "holm_fill", "mcnemar", "sign_flip_p", "monotone_envelope",
           "interpolate_log_cost", "shared_log_grid", "mean_band", "cost_to_reach"]
