"""Per-exit cumulative cost of a model, for both families, in one dictionary.

recursive: analytic MACs (see accounting.py) and fvcore's count of the same model;
sparseformer: fvcore's convention (as published: baddbmm and grid_sample not counted) and complete.
All figures per image, cumulative to each exit, in GFLOPs where one multiply-add = one FLOP.
"""
from __future__ import annotations

import torch

from itervision.evaluation import accounting
from itervision.evaluation.flops import count_flops

MATMUL_OPS = ("conv", "linear", "matmul", "einsum", "bmm", "addmm", "baddbmm", "mm")


def _matmul_only(by_op: dict) -> float:
    return sum(v for k, v in by_op.items() if any(k.endswith(o) or k == o for o in MATMUL_OPS))


def model_costs(model, fvcore: bool = True) -> dict:
    cfg = model.cfg
    img = torch.zeros(1, cfg.in_chans, cfg.img_size, cfg.img_size)
    stored = sum(p.numel() for p in model.parameters())
    out = {"family": model.family, "stored_params": stored, "num_exits": model.num_exits}
    if model.family == "recursive":
        cumulative = accounting.macs_per_step(cfg)
        out.update({
            "active_params": accounting.active_params(model),
            "macs_per_image": cumulative[-1],
            "macs_per_exit": cumulative,
            "step_macs": [accounting.step_macs(cfg, t) for t in range(1, cfg.steps + 1)],
            "block_mac_ratio": accounting.block_mac_ratio(cfg),
            "avg_sparsity": accounting.average_sparsity(cfg),
            "gflops_per_exit": [c / 1e9 for c in cumulative],
        })
        if fvcore:
            fv = count_flops(model, img)
            out["fvcore"] = {"flops": fv["flops"], "matmul_flops": _matmul_only(fv["by_operator"]),
                             "skipped_ops": sorted(fv["skipped_ops"])}
            out["fvcore"]["matmul_vs_analytic"] = out["fvcore"]["matmul_flops"] / cumulative[-1]
    else:
        out["active_params"] = stored
        if fvcore:
            conv = [count_flops(model, img, e)["flops"] / 1e9 for e in range(model.num_exits)]
            full = [count_flops(model, img, e, complete=True)["flops"] / 1e9 for e in range(model.num_exits)]
            out.update({"gflops_per_exit": conv, "gflops_complete_per_exit": full})
    return out
