"""Statistics across seeds (docs/design.md, Statistics): t-intervals, paired tests, Holm, frontiers."""
from itervision.stats.frontier import (cost_to_reach, interpolate_log_cost, mean_band, monotone_envelope,
                                       shared_log_grid)
from itervision.stats.calibration import expected_calibration_error
from itervision.stats.inference import holm, holm_fill, mcnemar, mean_ci, one_sample, paired_difference, sign_flip_p
from itervision.stats.power import paired_t_power, seeds_needed
from itervision.stats.resampling import (bootstrap_mean_ci, paired_bootstrap, probability_of_improvement,
                                         probability_of_improvement_ci)

__all__ = ["mean_ci", "paired_difference", "one_sample", "holm", "holm_fill", "mcnemar", "sign_flip_p",
           "monotone_envelope", "interpolate_log_cost", "shared_log_grid", "mean_band", "cost_to_reach",
           "expected_calibration_error", "paired_t_power", "seeds_needed", "bootstrap_mean_ci", "paired_bootstrap",
           "probability_of_improvement", "probability_of_improvement_ci"]
