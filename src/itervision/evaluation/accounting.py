"""Analytic parameter and multiply-add (MAC) accounting of the recursive classifier.

Counts multiply-adds of the matrix products (convolutions, linear layers, attention scores and values, the
indexer, the router, the prediction-token embedding); norms, activations, softmax and biases are left out,
as in the paper's block ratio. The formulas are general in every size: they reproduce the paper's figures at
its configuration (SA-MLP 13.13M parameters, DSA-MoE 7.10M active, block ratio 0.52, sparsity 0.358 / 0.751)
and are checked against fvcore and against the parameter count of the built model at other sizes.
"""
from __future__ import annotations

import dataclasses

from itervision.models.configs import EncoderConfig, RecursiveConfig

SA_MLP_RATIO = 4.0  # the paper's SA-MLP block: MLP d -> 4d -> d (8 d^2 of its 12 d^2 parameters)


def formula_sparsity(steps: int, topk: int) -> list[float]:
    """rho_t = max(0, 1 - k / L_t), L_t = t + 2."""
    return [max(0.0, 1.0 - topk / (t + 2)) for t in range(1, steps + 1)]


def encoder_macs(cfg: RecursiveConfig | EncoderConfig) -> int:
    macs, res, c = 0, cfg.img_size, cfg.in_chans
    for w in cfg.encoder_widths:
        macs += res * res * c * w * 9  # conv3x3, padding 1, at the stage's input resolution
        res, c = res // 2, w
    return macs + c * cfg.dim  # projection after global average pooling


def encoder_only_macs(cfg: EncoderConfig) -> int:
    """The encoder-only baseline: the encoder and the head."""
    return encoder_macs(cfg) + cfg.dim * cfg.num_classes


def block_macs(cfg: RecursiveConfig, L: int) -> dict:
    """MACs of one block on a sequence of L tokens, split by part."""
    d, dh = cfg.dim, cfg.dim // cfg.heads
    if cfg.attention == "dense":
        attn = {"qkvo": 4 * d * d * L, "scores_values": 2 * L * L * d, "indexer": 0}
    else:
        keep = min(cfg.topk, L)
        attn = {"qkvo": 2 * d * d * L + 2 * d * dh * L, "scores_values": 2 * L * keep * d, "indexer": L * L * dh}
    if cfg.ffn == "mlp":
        ffn = {"ffn": 2 * d * int(d * cfg.mlp_ratio) * L, "router": 0}
    else:
        ffn = {"ffn": cfg.experts_per_token * 2 * d * d * L, "router": d * cfg.experts * L}
    return {**attn, **ffn}


def step_macs(cfg: RecursiveConfig, t: int) -> int:
    """MACs of recursion step t (1-based): B blocks on L = t + 2 tokens, the head and the y embedding."""
    L = t + 2
    blocks = cfg.blocks * sum(block_macs(cfg, L).values())
    return blocks + cfg.dim * cfg.num_classes + cfg.num_classes * cfg.dim


def macs_per_step(cfg: RecursiveConfig) -> list[int]:
    """Cumulative MACs up to each exit (the encoder counted once, in the first)."""
    out, total = [], encoder_macs(cfg)
    for t in range(1, cfg.steps + 1):
        total += step_macs(cfg, t)
        out.append(total)
    return out


def block_mac_ratio(cfg: RecursiveConfig) -> float:
    """This model's block MACs over the paper's SA-MLP block (dense attention, MLP d -> 4d -> d) at the same
    width, summed over the steps."""
    dense = dataclasses.replace(cfg, attention="dense", topk=None, dsa_kernel=None, indexer_kl_weight=None,
                                ffn="mlp", mlp_ratio=SA_MLP_RATIO, experts=None, experts_per_token=None,
                                balance_weight=None)
    Ls = range(3, cfg.steps + 3)
    return sum(sum(block_macs(cfg, L).values()) for L in Ls) / sum(sum(block_macs(dense, L).values()) for L in Ls)


def expert_params(cfg: RecursiveConfig) -> int:
    """One expert d -> d -> d with biases."""
    return 2 * cfg.dim * cfg.dim + 2 * cfg.dim


def analytic_params(cfg: RecursiveConfig) -> dict:
    """Stored and active (one token: m of E experts) parameter counts, from the sizes alone."""
    d, C, dh = cfg.dim, cfg.num_classes, cfg.dim // cfg.heads
    enc, c = 0, cfg.in_chans
    for w in cfg.encoder_widths:
        enc += c * w * 9 + w + 2 * w  # conv weight + bias, BatchNorm weight + bias
        c = w
    enc += c * d + d
    kv = d if cfg.attention == "dense" else dh
    attn = 2 * (d * d + d) + 2 * (d * kv + kv)
    norms = 2 * 2 * d
    if cfg.ffn == "mlp":
        hid = int(d * cfg.mlp_ratio)
        ffn_stored = ffn_active = d * hid + hid + hid * d + d
    else:
        router = d * cfg.experts + cfg.experts
        ffn_stored = router + cfg.experts * expert_params(cfg)
        ffn_active = router + cfg.experts_per_token * expert_params(cfg)
    outside = enc + 2 * d + 3 * d + C * d + 2 * d + d * C + C  # y0, z0, roles, class embed, final norm, head
    return {"stored": outside + cfg.blocks * (attn + norms + ffn_stored),
            "active": outside + cfg.blocks * (attn + norms + ffn_active), "outside_blocks": outside}


def active_params(model) -> int:
    """Active parameters of a built model: every parameter, less the E - m experts a token does not use."""
    cfg = model.cfg
    stored = sum(p.numel() for p in model.parameters())
    if cfg.ffn != "moe":
        return stored
    unused = cfg.blocks * (cfg.experts - cfg.experts_per_token) * expert_params(cfg)
    return stored - unused


def average_sparsity(cfg: RecursiveConfig) -> float:
    if cfg.attention == "dense":
        return 0.0
    rho = formula_sparsity(cfg.steps, cfg.topk)
    return sum(rho) / len(rho)
