"""SparseFormer units and the recurrent SparseFormer with memory and per-round exits (seed document 003).

A block is a readable list of operations:
    focus/sampling block:  tokens += attn(LN(tokens))
                           boxes   = adjust(LN(tokens), boxes)              (fp32)
                           points  = centre + standardised offsets * size   (fp32)
                           feats   = grid_sample(feature map, points)        (B, N, P, C)
                           tokens += mix(LN(tokens), feats)                  (adaptive channel + point mixing)
                           tokens += mlp(LN(tokens))
    cortex block:          tokens += attn(LN(tokens)); tokens += mlp(LN(tokens))
    memory read (round r > 1, before cortex block `memory_at`):
                           Z = V + a * CrossAttn(LN(V + p(R_r)), LN(M + p(R_{r-1})), LN(M))

The stem runs once per image; round r has its own token grid, embeddings and initial boxes (a non-overlapping
tiling); focus, cortex and head weights are shared by all rounds. A static SparseFormer is one round.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from itervision.models.configs import SparseFormerConfig
from itervision.models.layers import DropPath, Mlp, attend, exit_loss_weights, init_weights


def tiling_boxes(n: int) -> torch.Tensor:
    """A non-overlapping g x g tiling of the unit square as (cx, cy, w, h), row-major."""
    g = math.isqrt(n)
    i = (torch.arange(g, dtype=torch.float32) + 0.5) / g
    cy, cx = torch.meshgrid(i, i, indexing="ij")
    size = torch.full((n,), 1.0 / g)
    return torch.stack([cx.flatten(), cy.flatten(), size, size], -1)


def point_grid(p: int) -> torch.Tensor:
    """Initial offsets: a g x g grid in [-0.5, 0.5]^2 (first p points), as (p, 2) with x first."""
    g = math.ceil(math.sqrt(p))
    v = torch.linspace(-0.5, 0.5, g) if g > 1 else torch.zeros(1)
    yy, xx = torch.meshgrid(v, v, indexing="ij")
    return torch.stack([xx.flatten(), yy.flatten()], -1)[:p]


def adjust_boxes(boxes: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """(cx, cy, w, h) moved by (dx, dy) * (w, h) and scaled by exp(dw, dh); computed in fp32."""
    boxes, delta = boxes.float(), delta.float()
    centre = boxes[..., :2] + delta[..., :2] * boxes[..., 2:]
    size = boxes[..., 2:] * delta[..., 2:].exp()
    return torch.cat([centre, size], -1)


def sampling_points(boxes: torch.Tensor, offsets: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Offsets (B, N, P, 2) standardised over P per token and axis ((o - mean) / (3 std)), scaled by the box
    size, added to the box centre. Returns points in [0, 1] image coordinates, fp32."""
    o = offsets.float()
    o = o - o.mean(2, keepdim=True)
    # the population std from the centred offsets: torch.std over this strided dim of 9 took ~10 % of the
    # SparseFormer forward here (3 ms per call at batch 500), mean of squares + sqrt ~4x less
    o = o / (3 * o.square().mean(2, keepdim=True).sqrt() + eps)
    return boxes[..., None, :2].float() + o * boxes[..., None, 2:].float()


def sample_features(fmap: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Bilinear read of fmap (B, C, H, W) at points (B, N, P, 2) in [0, 1] -> (B, N, P, C), one grid_sample."""
    grid = points * 2 - 1  # grid_sample's [-1, 1] with align_corners=False
    out = F.grid_sample(fmap.float(), grid.float(), mode="bilinear", padding_mode="zeros", align_corners=False)
    return out.permute(0, 2, 3, 1).to(fmap.dtype)  # B C N P -> B N P C


class Attention(nn.Module):
    """Multi-head attention (fused product; explicit matmuls under tracing, so fvcore counts them)."""

    def __init__(self, dim: int, heads: int, kv_dim: int | None = None):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(kv_dim or dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, context=None, value=None):
        B, N, D = x.shape
        H = self.heads
        ctx = x if context is None else context
        q = self.q(x).view(B, N, H, -1).transpose(1, 2)
        if value is None:
            k, v = self.kv(ctx).view(B, ctx.shape[1], 2, H, -1).permute(2, 0, 3, 1, 4)
        else:  # separate key and value inputs (memory read): project each with its half of kv
            wk, wv = self.kv.weight.chunk(2)
            bk, bv = self.kv.bias.chunk(2)
            k = F.linear(ctx, wk, bk).view(B, ctx.shape[1], H, -1).transpose(1, 2)
            v = F.linear(value, wv, bv).view(B, value.shape[1], H, -1).transpose(1, 2)
        out, _ = attend(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(B, N, D))


class AdaptiveMixing(nn.Module):
    """Token-conditioned mixing of the P x C sampled features (AdaMixer-style).

    A low-rank generator (d -> d/4 -> C^2 + P^2, zero-initialised weight, bias = Xavier matrices) gives each
    token a C x C channel-mixing and a P x P point-mixing matrix. The mixing products are affine maps written
    with `torch.baddbmm` (bias + batched matmul), the op fvcore does not count, as in the published counts.
    """

    def __init__(self, dim: int, channels: int, points: int):
        super().__init__()
        self.C, self.P = channels, points
        self.generator = nn.Sequential(nn.Linear(dim, dim // 4), nn.Linear(dim // 4, channels ** 2 + points ** 2))
        self.channel_bias = nn.Parameter(torch.zeros(1, 1, channels))
        self.point_bias = nn.Parameter(torch.zeros(1, points, 1))
        self.out = nn.Linear(points * channels, dim)

    def init_generator(self):
        last = self.generator[1]
        nn.init.zeros_(last.weight)
        mc, mp = torch.empty(self.C, self.C), torch.empty(self.P, self.P)
        nn.init.xavier_uniform_(mc)
        nn.init.xavier_uniform_(mp)
        with torch.no_grad():
            last.bias.copy_(torch.cat([mc.flatten(), mp.flatten()]))

    def forward(self, q, feats):
        B, N, P, C = feats.shape
        params = self.generator(q).reshape(B * N, -1)
        m_channel = params[:, : C * C].reshape(B * N, C, C)
        m_point = params[:, C * C:].reshape(B * N, P, P)
        f = feats.reshape(B * N, P, C)
        f = F.gelu(torch.baddbmm(self.channel_bias, f, m_channel))  # (P x C) @ (C x C)
        f = F.gelu(torch.baddbmm(self.point_bias, m_point, f))  # (P x P) @ (P x C)
        return self.out(f.reshape(B, N, P * C))


class SamplingBlock(nn.Module):
    """Self-attention -> box adjusting -> sampling -> adaptive mixing -> FFN (pre-LN)."""

    def __init__(self, dim, heads, channels, points, mlp_ratio, drop_path):
        super().__init__()
        self.norm_attn = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm_query = nn.LayerNorm(dim)  # shared by box adjusting, offsets and the mixing generator
        self.box_delta = nn.Linear(dim, 4, bias=False)
        self.offsets = nn.Linear(dim, 2 * points)
        self.mixing = AdaptiveMixing(dim, channels, points)
        self.norm_mlp = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.drop_path = DropPath(drop_path)
        self.points = points

    def init_special(self):
        nn.init.zeros_(self.box_delta.weight)  # box adjusting is the identity at init
        nn.init.zeros_(self.offsets.weight)
        with torch.no_grad():
            self.offsets.bias.copy_(point_grid(self.points).flatten())
        self.mixing.init_generator()

    def forward(self, tokens, boxes, fmap):
        B, N, _ = tokens.shape
        tokens = tokens + self.drop_path(self.attn(self.norm_attn(tokens)))
        q = self.norm_query(tokens)
        with torch.autocast(device_type=tokens.device.type, enabled=False):
            boxes = adjust_boxes(boxes, self.box_delta(q.float()))
            points = sampling_points(boxes, self.offsets(q.float()).view(B, N, self.points, 2))
        feats = sample_features(fmap, points).to(q.dtype)
        tokens = tokens + self.drop_path(self.mixing(q, feats))
        tokens = tokens + self.drop_path(self.mlp(self.norm_mlp(tokens)))
        return tokens, boxes


class CortexBlock(nn.Module):
    def __init__(self, dim, heads, mlp_ratio, drop_path):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim), Attention(dim, heads)
        self.norm2, self.mlp = nn.LayerNorm(dim), Mlp(dim, int(dim * mlp_ratio))
        self.drop_path = DropPath(drop_path)

    def forward(self, tokens, boxes, fmap):
        tokens = tokens + self.drop_path(self.attn(self.norm1(tokens)))
        tokens = tokens + self.drop_path(self.mlp(self.norm2(tokens)))
        return tokens, boxes


class MemoryRead(nn.Module):
    """Z = V + a * CrossAttn(LN(V + p(R_r)), LN(M + p(R_{r-1})), LN(M)); p linear in the box, a init 1."""

    def __init__(self, dim, heads):
        super().__init__()
        self.box_encoding = nn.Linear(4, dim)
        self.norm_q, self.norm_k, self.norm_v = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, tokens, boxes, memory, memory_boxes):
        p_new = self.box_encoding(boxes.to(tokens.dtype))
        p_old = self.box_encoding(memory_boxes.to(tokens.dtype))
        read = self.attn(self.norm_q(tokens + p_new), self.norm_k(memory + p_old), self.norm_v(memory))
        return tokens + self.scale * read


class Stem(nn.Module):
    """Conv (kernel, stride) -> ReLU -> max-pool 3/2 -> parameter-free LayerNorm over channels at every pixel.

    Computed as conv -> max-pool -> ReLU: the same function (ReLU is monotone, so it commutes with a max), with
    ReLU on 4x fewer activations (the ReLU of the full 28 x 28 map was ~4 % of the SparseFormer forward here)."""

    def __init__(self, in_chans, channels, kernel, stride, pool):
        super().__init__()
        self.conv = nn.Conv2d(in_chans, channels, kernel, stride, padding=kernel // 2)
        self.pool = nn.MaxPool2d(3, 2, 1) if pool else nn.Identity()

    def forward(self, img):
        # channels_last (the model stores the conv weight so): 2.3x faster stem training here than NCHW
        f = F.relu(self.pool(self.conv(img.contiguous(memory_format=torch.channels_last))))
        return F.layer_norm(f.permute(0, 2, 3, 1), f.shape[1:2]).permute(0, 3, 1, 2)


class RecurrentSparseFormer(nn.Module):
    """forward(img, exits=None) -> {"logits": [one (B, C) per round], "aux_loss": 0}; an exit after every round."""

    def __init__(self, cfg: SparseFormerConfig):
        super().__init__()
        self.cfg = cfg
        self.stem = Stem(cfg.in_chans, cfg.stem_channels, cfg.stem_kernel, cfg.stem_stride, cfg.stem_pool)
        self.token_embed = nn.ParameterList(nn.Parameter(torch.empty(n, cfg.focus_dim)) for n in cfg.rounds)
        self.token_boxes = nn.ParameterList(nn.Parameter(tiling_boxes(n)) for n in cfg.rounds)
        dpr = torch.linspace(0, cfg.drop_path, cfg.cortex_depth + 1).tolist()
        self.focus = SamplingBlock(cfg.focus_dim, cfg.focus_heads, cfg.stem_channels, cfg.points, cfg.mlp_ratio,
                                   dpr[0])
        self.lift = nn.Sequential(nn.Linear(cfg.focus_dim, cfg.cortex_dim), nn.LayerNorm(cfg.cortex_dim))
        self.cortex = nn.ModuleList()
        for i in range(cfg.cortex_depth):
            if i == 0 and cfg.cortex_first_samples:
                blk = SamplingBlock(cfg.cortex_dim, cfg.cortex_heads, cfg.stem_channels, cfg.points,
                                    cfg.mlp_ratio, dpr[i + 1])
            else:
                blk = CortexBlock(cfg.cortex_dim, cfg.cortex_heads, cfg.mlp_ratio, dpr[i + 1])
            self.cortex.append(blk)
        self.memory = MemoryRead(cfg.cortex_dim, cfg.memory_heads) if cfg.memory and len(cfg.rounds) > 1 else None
        self.norm = nn.LayerNorm(cfg.cortex_dim)
        self.head = nn.Linear(cfg.cortex_dim, cfg.num_classes)
        self.apply(init_weights)
        for emb in self.token_embed:
            nn.init.trunc_normal_(emb, std=1.0, a=-2.0, b=2.0)
        for m in self.modules():
            if isinstance(m, SamplingBlock):
                m.init_special()
        self.stem.to(memory_format=torch.channels_last)  # see Stem.forward

    @property
    def num_exits(self) -> int:
        return len(self.cfg.rounds)

    def exit_loss_weights(self) -> list[float]:
        return exit_loss_weights(len(self.cfg.rounds), self.cfg.earlier_weight)

    def no_weight_decay(self) -> set[str]:
        """Names excluded from weight decay beyond 1-D parameters and biases (timm convention): the boxes."""
        return {n for n, _ in self.named_parameters() if n.startswith("token_boxes")}

    def run_round(self, r, fmap, memory=None, memory_boxes=None):
        B = fmap.shape[0]
        tokens = self.token_embed[r].expand(B, -1, -1)
        boxes = self.token_boxes[r].expand(B, -1, -1)
        for _ in range(self.cfg.focus_iters):  # one block, shared weights, applied several times
            tokens, boxes = self.focus(tokens, boxes, fmap)
        tokens = self.lift(tokens)
        for i, blk in enumerate(self.cortex):
            if i == self.cfg.memory_at and self.memory is not None and memory is not None:
                tokens = self.memory(tokens, boxes, memory, memory_boxes)
            tokens, boxes = blk(tokens, boxes, fmap)
        return tokens, boxes

    def classify(self, tokens):
        return self.head(self.norm(tokens.mean(1)))

    def forward(self, img, exits: int | None = None):
        """Run the first `exits` rounds (default: all); one logits tensor per round."""
        fmap = self.stem(img)  # once per image
        memory = memory_boxes = None
        logits = []
        for r in range(exits or len(self.cfg.rounds)):
            tokens, boxes = self.run_round(r, fmap, memory, memory_boxes)
            logits.append(self.classify(tokens))
            memory, memory_boxes = tokens, boxes  # only the previous round's cortex output carries over
        return {"logits": logits, "aux_loss": img.new_zeros(())}
