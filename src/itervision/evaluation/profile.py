"""Profile of a model (stage profile, one per (dataset, model), not per seed): parameters and cost per exit
(evaluation/costs.py) and wall-clock per exit (evaluation/timing.py), measured on the initialised model with
random images: neither depends on the trained weights beyond routing noise."""
from __future__ import annotations

import torch

from itervision.evaluation.costs import model_costs
from itervision.evaluation.timing import time_exits
from itervision.models.registry import build_model


def profile_model(model_json: dict, profile_json: dict, fvcore: bool = True) -> dict:
    torch.manual_seed(0)
    model = build_model(model_json["config"], model_json["num_classes"], model_json["in_chans"]).eval()
    costs = model_costs(model, fvcore=fvcore)  # on the CPU, before the model moves
    if torch.cuda.is_available():
        model.cuda()
    p = profile_json
    timing = time_exits(model, p["timing_batch"], p["timing_warmup"], p["timing_repeats"], p["latency_repeats"])
    device = "cuda: " + torch.cuda.get_device_name() if torch.cuda.is_available() else \
        f"cpu, {torch.get_num_threads()} threads"
    return {"model": model_json["model"], "dataset": model_json["dataset"], "family": model_json["config"]["family"],
            "costs": costs, "timing": timing, "device": device}
