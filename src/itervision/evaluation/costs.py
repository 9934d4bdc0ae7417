"""Per-exit cumulative cost of a model, one function per family, in one dictionary.

recursive and encoder: analytic multiply-adds (accounting.py) with fvcore's count of the same model beside
them; sparseformer: fvcore GFLOPs in the published convention (the adaptive-mixing baddbmm uncounted) and
complete. All figures per image, cumulative to each exit, in GFLOPs where one multiply-add = one FLOP.
"""
from __future__ import annotations

import torch

from itervision.evaluation import accounting
from itervision.evaluation.flops import count_flops

MATMUL_OPS = ("conv", "linear", "matmul", "einsum", "bmm", "addmm", "baddbmm", "mm")


def _matmul_only(by_op: dict) -> float:
    return sum(v for k, v in by_op.items() if any(k.endswith(o) or k == o for o in MATMUL_OPS))


def _fvcore_check(model, img, analytic: float) -> dict:
    fv = count_flops(model, img)
    matmul = _matmul_only(fv["by_operator"])
    return {"flops": fv["flops"], "matmul_flops": matmul, "skipped_ops": sorted(fv["skipped_ops"]),
            "matmul_vs_analytic": matmul / analytic}


def recursive_costs(model, img, fvcore: bool) -> dict:
    cfg = model.cfg
    cumulative = accounting.macs_per_step(cfg)
    out = {"active_params": accounting.active_params(model), "macs_per_image": cumulative[-1],
           "macs_per_exit": cumulative, "step_macs": [accounting.step_macs(cfg, t) for t in range(1, cfg.steps + 1)],
           "block_mac_ratio": accounting.block_mac_ratio(cfg), "avg_sparsity": accounting.average_sparsity(cfg),
           "gflops_per_exit": [c / 1e9 for c in cumulative]}
    if fvcore:
        out["fvcore"] = _fvcore_check(model, img, cumulative[-1])
    return out


def encoder_costs(model, img, fvcore: bool) -> dict:
    macs = accounting.encoder_only_macs(model.cfg)
    out = {"active_params": sum(p.numel() for p in model.parameters()), "macs_per_image": macs,
           "macs_per_exit": [macs], "gflops_per_exit": [macs / 1e9]}
    if fvcore:
        out["fvcore"] = _fvcore_check(model, img, macs)
    return out


def sparseformer_costs(model, img, fvcore: bool) -> dict:
    out = {"active_params": sum(p.numel() for p in model.parameters())}
    if fvcore:
        out["gflops_per_exit"] = [count_flops(model, img, e)["flops"] / 1e9 for e in range(model.num_exits)]
        out["gflops_complete_per_exit"] = [count_flops(model, img, e, complete=True)["flops"] / 1e9
                                           for e in range(model.num_exits)]
    return out


FAMILY_COSTS = {"recursive": recursive_costs, "encoder": encoder_costs, "sparseformer": sparseformer_costs}


def model_costs(model, fvcore: bool = True) -> dict:
    cfg = model.cfg
    img = torch.zeros(1, cfg.in_chans, cfg.img_size, cfg.img_size)
    out = {"family": model.family, "stored_params": sum(p.numel() for p in model.parameters()),
           "num_exits": model.num_exits}
    out.update(FAMILY_COSTS[model.family](model, img, fvcore))
    return out
