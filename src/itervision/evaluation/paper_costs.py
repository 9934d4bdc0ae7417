"""Costs of every model at the paper configurations (stage paper_costs): what the published parameter,
multiply-add, sparsity and GFLOPs figures are checked against. The recursive classifier on its first paper
dataset (CIFAR-10, 32 px) analytically; every SparseFormer (dataset, model) by fvcore in the published
convention (the adaptive-mixing baddbmm uncounted)."""
from __future__ import annotations

from itervision.evaluation.costs import model_costs
from itervision.evaluation.flops import count_flops
from itervision.config.matrix import model_spec, study_models
from itervision.models.registry import build_model
from itervision.config.params import check_params
from itervision.config.scales import render_scale

KEEP = ("stored_params", "active_params", "block_mac_ratio", "avg_sparsity", "gflops_per_exit")


def paper_costs(scale: str = "paper") -> dict:
    import torch

    p = check_params(render_scale(scale))
    out = {"scale": scale, "recursive": {}, "sparseformer": {}}
    first = p.study("recursive").datasets[0]
    out["recursive_dataset"] = first
    for ds, m in study_models(p, "recursive"):
        if ds == first:
            torch.manual_seed(0)
            costs = model_costs(build_model(model_spec(p, m, ds).config), fvcore=False)
            out["recursive"][m] = {k: costs[k] for k in KEEP if k in costs}
    for ds, m in study_models(p, "sparseformer"):
        torch.manual_seed(0)
        model = build_model(model_spec(p, m, ds).config)
        img = torch.zeros(1, model.cfg.in_chans, model.cfg.img_size, model.cfg.img_size)
        out["sparseformer"].setdefault(ds, {})[m] = {
            "stored_params": sum(t.numel() for t in model.parameters()),
            "gflops_per_exit": [count_flops(model, img, e)["flops"] / 1e9 for e in range(model.num_exits)]}
    return out
