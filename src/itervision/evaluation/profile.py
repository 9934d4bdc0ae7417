"""Profile of a model (stage profile, one per (dataset, model), not per seed): parameters and cost per exit
(evaluation/costs.py) and wall-clock per exit (evaluation/timing.py), measured on the initialised model with
random images: neither depends on the trained weights beyond routing noise."""
from __future__ import annotations

import torch

from itervision.evaluation.costs import model_costs
from itervision.evaluation.timing import time_exits
from itervision.models.registry import build_model


def profile_model(spec, profile, fvcore: bool = True) -> dict:
    """spec: specs.ModelSpec; profile: run_configs.ProfileConfig."""
    torch.manual_seed(0)
    model = build_model(spec.config).eval()
    costs = model_costs(model, fvcore=fvcore)  # on the CPU, before the model moves
    if torch.cuda.is_available():
        model.cuda()
    timing = time_exits(model, profile.timing_batch, profile.timing_warmup, profile.timing_repeats,
                        profile.latency_repeats)
    device = "cuda: " + torch.cuda.get_device_name() if torch.cuda.is_available() else \
        f"cpu, {torch.get_num_threads()} threads"
    return {"model": spec.model, "dataset": spec.dataset, "family": spec.family, "costs": costs, "timing": timing,
            "device": device}
