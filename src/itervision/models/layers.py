"""What both model files share: a transformer MLP, stochastic depth, the attention product, weight
initialisation and the loss weights of the exits.

timm.layers has both (Mlp, DropPath) with the same behaviour and parameter names, but importing anything
from timm runs timm/__init__, which imports torchvision and through it torch._dynamo: 4 s per process on
this 2-core machine, paid by every one of the ~80 processes of a CPU-scale `make repro`. The two are
a few lines each, so they are written here; timm stays in use where its import is paid anyway (ImageNet
transforms, mixup/CutMix, RandAugment).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Sequential):
    """Linear(d, hidden) -> GELU -> Linear(hidden, d), named fc1/act/fc2 as in timm."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)


class DropPath(nn.Module):
    """Stochastic depth per sample: in training, zero a residual branch with probability p, scale by 1/(1-p)."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0:
            return x
        keep = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(1 - self.p)
        return x * keep.div_(1 - self.p)


def init_weights(m: nn.Module) -> None:
    """Explicit initialisation of both families (applied with model.apply): Xavier-uniform linear layers
    (width-aware; std 0.02 is tuned for d = 768 and too small at d = 64), Kaiming-normal convolutions (fan out,
    ReLU), zero biases, and unit/zero norms."""
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.Conv2d):
        nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, (nn.LayerNorm, nn.BatchNorm2d)):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)


def exit_loss_weights(exits: int, earlier_weight: float | None) -> list[float]:
    """Weights of the per-exit losses: the mean over exits (earlier_weight None), or 1 on the last exit and
    earlier_weight shared evenly by the earlier ones (CE(last) + w * mean CE(earlier))."""
    if exits == 1:
        return [1.0]
    if earlier_weight is None:
        return [1.0 / exits] * exits
    return [earlier_weight / (exits - 1)] * (exits - 1) + [1.0]


def attend(q, k, v, allowed=None, weights: bool = False):
    """softmax(q k^T / sqrt(d_h)) v over (B, H, L, d_h) tensors; k and v may have one head shared by all
    (multi-query). `allowed` (broadcastable to B, H, L, S; True = may attend) masks keys.

    Returns (output, attention probabilities or None). Training and inference use torch's fused
    scaled_dot_product_attention (2x faster here at L <= 25 than three separate ops). Where the probabilities
    are wanted (traces), or under torch.jit tracing (fvcore FLOP counts, which do not count the fused op),
    the same attention is written as explicit products.
    """
    if weights or torch.jit.is_tracing():
        scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        attn = scores.softmax(-1)
        return attn @ v, attn
    H = q.shape[1]
    return F.scaled_dot_product_attention(q, k.expand(-1, H, -1, -1), v.expand(-1, H, -1, -1),
                                          attn_mask=allowed), None
