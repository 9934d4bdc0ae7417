"""FLOP counting with fvcore (one multiply-add = one FLOP, the published convention).

fvcore has no handle for some ops; they are skipped silently in its default count. In our models that is
`aten::baddbmm`, SparseFormer's adaptive mixing, as in the published counts; the complete count registers a
handle for it (batch * n * m * p multiply-adds, like bmm). fvcore already counts `aten::grid_sampler` as 4 per
output element (bilinear); `aten::grid_sampler_2d`, which some traces emit instead, gets the same handle.
Attention uses torch's fused scaled_dot_product_attention, which fvcore does not count, except under
torch.jit tracing, where models/layers.attend writes it as explicit matmuls; the MoE likewise runs its exact
per-expert products under tracing (models/recursive.py), so the counts are of what the model computes.
"""
from __future__ import annotations

import logging
from math import prod

import torch
import torch.nn as nn


def _shape(v):
    return v.type().sizes()


def baddbmm_flop(inputs, outputs):
    # inputs: (bias, batch1 (b, n, m), batch2 (b, m, p), beta, alpha)
    b, n, m = _shape(inputs[1])
    p = _shape(inputs[2])[-1]
    return b * n * m * p


def grid_sample_flop(inputs, outputs):
    return 4 * prod(_shape(outputs[0]))


COMPLETE_HANDLES = {"aten::baddbmm": baddbmm_flop, "aten::grid_sampler_2d": grid_sample_flop}


def run_to_exit(model, img, exit_index: int) -> list:
    """Logits of exits 1..exit_index+1, running only what those exits need (stem/encoder + steps or rounds)."""
    return model(img, exits=exit_index + 1)["logits"]


class _ExitWrapper(nn.Module):
    """Runs a model up to one exit and returns the logits of every exit so far. All of them are returned
    because the JIT trace fvcore counts drops work that does not reach an output: without the memory, earlier
    rounds do not feed the last exit, yet an image that stops there has paid for them."""

    def __init__(self, model, exit_index):
        super().__init__()
        self.model, self.exit_index = model, exit_index

    def forward(self, img):
        return tuple(run_to_exit(self.model, img, self.exit_index))


def count_flops(model: nn.Module, img: torch.Tensor, exit_index: int = -1, complete: bool = False) -> dict:
    """Total fvcore FLOPs (per image) up to `exit_index`, and the operators fvcore skipped."""
    from fvcore.nn import FlopCountAnalysis

    if exit_index < 0:
        exit_index += model.num_exits
    was_training = model.training
    model.eval()
    analysis = FlopCountAnalysis(_ExitWrapper(model, exit_index), img)
    analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
    if complete:
        analysis.set_op_handle(**COMPLETE_HANDLES)
    logging.getLogger("fvcore").setLevel(logging.ERROR)
    with torch.no_grad():
        total = analysis.total()
        skipped = dict(analysis.unsupported_ops())
        by_op = dict(analysis.by_operator())
    model.train(was_training)
    n = img.shape[0]
    return {"flops": total / n, "by_operator": {k: v / n for k, v in by_op.items()}, "skipped_ops": skipped}
