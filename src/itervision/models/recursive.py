"""Recursive visual classifier with dynamic sparse attention (DSA) and a mixture-of-experts (MoE) FFN.

Seed document 000. Streams (TRM naming): x = global image embedding (computed once), y = class-hypothesis
token, Z = latent history that grows by one state per step. Step t runs the shared block stack on
h_t = [x; y_{t-1}; Z_{t-1}] (length t + 2) and every step is an exit.

Design choices the summary leaves open (documented in README "Recursive classifier"):
* z_t is the block-stack output at the newest history position; y_t's logits come from the y position.
* hard embedding: E_cls[argmax] with a straight-through gradient; soft: softmax(logits) @ E_cls.
* DSA indexer: I(t,s) = q̄_t · k_s / sqrt(d_h), q̄ = head-averaged query, k = the shared (multi-query) key,
  so it has no parameters of its own (this is what reproduces the paper's 7.10M active parameters). Its
  selection scores learn through an auxiliary KL(dense head-averaged attention ‖ softmax(I)) with weight
  `indexer_kl_weight`, computed only in training, as in DeepSeek-V3.2's indexer warm-up.
* MoE balancing: Switch form over the m choices, E · Σ_i f_i P_i, which equals 1 at uniform routing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import DropPath, Mlp, trunc_normal_

ROLES = ("x", "y", "z")


@dataclass
class RecursiveConfig:
    num_classes: int = 10
    in_chans: int = 3
    img_size: int = 32
    encoder_widths: tuple = (64, 128, 256)
    dim: int = 512
    heads: int = 8
    blocks: int = 4
    steps: int = 16
    attention: str = "dsa"  # dense | dsa
    topk: int = 6
    ffn: str = "moe"  # mlp | moe
    mlp_ratio: float = 4.0
    experts: int = 4
    experts_per_token: int = 2
    expert_hidden: int | None = None  # default: dim (experts are d -> d -> d)
    embedding: str = "hard"  # hard | soft
    drop_path: float = 0.0
    step_loss: str = "mean"  # mean: mean CE over steps | last_plus: CE(last) + w * mean CE(earlier)
    earlier_weight: float = 0.1
    balance_weight: float = 0.01
    indexer_kl_weight: float = 0.1
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.attention not in ("dense", "dsa"):
            raise ValueError(f"attention must be dense or dsa, got {self.attention!r}")
        if self.ffn not in ("mlp", "moe"):
            raise ValueError(f"ffn must be mlp or moe, got {self.ffn!r}")
        if self.embedding not in ("hard", "soft"):
            raise ValueError(f"embedding must be hard or soft, got {self.embedding!r}")
        if self.step_loss not in ("mean", "last_plus"):
            raise ValueError(f"step_loss must be mean or last_plus, got {self.step_loss!r}")
        if self.dim % self.heads:
            raise ValueError(f"dim {self.dim} is not divisible by heads {self.heads}")
        if not 1 <= self.experts_per_token <= self.experts:
            raise ValueError("experts_per_token must be between 1 and experts")
        self.encoder_widths = tuple(self.encoder_widths)


class ConvEncoder(nn.Module):
    """Three conv3x3-BN-ReLU -> max-pool stages, global average pooling, projection to width d."""

    def __init__(self, in_chans: int, widths: tuple, dim: int):
        super().__init__()
        layers, c = [], in_chans
        for w in widths:
            layers += [nn.Conv2d(c, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(inplace=True), nn.MaxPool2d(2)]
            c = w
        self.features = nn.Sequential(*layers)
        self.proj = nn.Linear(c, dim)

    def forward(self, img):
        return self.proj(self.features(img).mean(dim=(2, 3)))


class RecursiveAttention(nn.Module):
    """Dense multi-head attention, or DSA: top-k keys per query chosen by an indexer, one shared K/V head."""

    def __init__(self, dim: int, heads: int, mode: str, topk: int):
        super().__init__()
        self.heads, self.head_dim, self.mode, self.topk = heads, dim // heads, mode, topk
        kv_dim = dim if mode == "dense" else self.head_dim  # multi-query: K and V shared by all heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, kv_dim)
        self.v = nn.Linear(dim, kv_dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, trace: dict | None = None):
        B, L, D = x.shape
        H, dh = self.heads, self.head_dim
        q = self.q(x).view(B, L, H, dh).transpose(1, 2)  # B H L dh
        k = self.k(x).view(B, L, -1, dh).transpose(1, 2)  # B H|1 L dh
        v = self.v(x).view(B, L, -1, dh).transpose(1, 2)
        scale = dh ** -0.5
        aux = x.new_zeros(())
        if self.mode == "dense":
            attn = (q @ k.transpose(-2, -1) * scale).softmax(-1)  # B H L L
            out = attn @ v
            keep = L
        else:
            k1, v1 = k[:, 0], v[:, 0]  # B L dh
            index = (q.mean(1) @ k1.transpose(-2, -1)) * scale  # B L L: indexer scores, head-averaged query
            keep = min(self.topk, L)  # dense whenever L <= k
            sel = index.topk(keep, dim=-1).indices  # B L keep
            k_sel = torch.gather(k1.unsqueeze(1).expand(B, L, L, dh), 2, sel.unsqueeze(-1).expand(-1, -1, -1, dh))
            v_sel = torch.gather(v1.unsqueeze(1).expand(B, L, L, dh), 2, sel.unsqueeze(-1).expand(-1, -1, -1, dh))
            scores = torch.einsum("bhld,blkd->bhlk", q, k_sel) * scale  # only the selected keys
            attn = scores.softmax(-1)
            out = torch.einsum("bhlk,blkd->bhld", attn, v_sel)
            if self.training:
                # Indexer alignment: KL(dense head-averaged attention (detached) || softmax(index scores)).
                with torch.no_grad():
                    dense = (q @ k1.unsqueeze(1).transpose(-2, -1) * scale).softmax(-1).mean(1)
                aux = F.kl_div(index.log_softmax(-1), dense, reduction="batchmean") / L
        if trace is not None:
            full = attn if self.mode == "dense" else torch.zeros(B, H, L, L, dtype=attn.dtype,
                                                                 device=attn.device).scatter(
                3, sel.unsqueeze(1).expand(-1, H, -1, -1), attn)
            trace.setdefault("masked_pairs", 0)
            trace.setdefault("total_pairs", 0)
            trace["masked_pairs"] += B * L * (L - keep)
            trace["total_pairs"] += B * L * L
            trace.setdefault("attn", []).append(full.detach().mean(1))  # B L L, head-averaged
        out = out.transpose(1, 2).reshape(B, L, D)
        return self.proj(out), aux


class Expert(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class MoE(nn.Module):
    """Top-m of E experts per token, softmax router; dispatch runs each expert only on its tokens."""

    def __init__(self, dim: int, hidden: int, experts: int, top: int):
        super().__init__()
        self.num_experts, self.top = experts, top
        self.router = nn.Linear(dim, experts)
        self.experts = nn.ModuleList(Expert(dim, hidden) for _ in range(experts))

    def route(self, x2d):
        probs = self.router(x2d).softmax(-1)  # N E
        weight, idx = probs.topk(self.top, dim=-1)  # N m
        weight = weight / weight.sum(-1, keepdim=True)
        return probs, weight, idx

    def forward(self, x, trace: dict | None = None):
        shape = x.shape
        x2d = x.reshape(-1, shape[-1])
        probs, weight, idx = self.route(x2d)
        out = torch.zeros_like(x2d)
        for e, expert in enumerate(self.experts):
            token, slot = (idx == e).nonzero(as_tuple=True)
            if token.numel():
                out.index_add_(0, token, (expert(x2d[token]) * weight[token, slot, None]).to(out.dtype))
        counts = torch.bincount(idx.flatten(), minlength=self.num_experts).to(x.dtype)
        f = counts / idx.numel()  # share of the N*m assignments per expert
        p = probs.mean(0)
        balance = self.num_experts * (f * p).sum()
        if trace is not None:
            trace.setdefault("expert_counts", []).append(counts.detach())
            trace.setdefault("experts_used", []).append(idx.detach())
        return out.reshape(shape), balance


class Block(nn.Module):
    def __init__(self, cfg: RecursiveConfig, drop_path: float):
        super().__init__()
        d = cfg.dim
        self.norm1 = nn.LayerNorm(d)
        self.attn = RecursiveAttention(d, cfg.heads, cfg.attention, cfg.topk)
        self.norm2 = nn.LayerNorm(d)
        if cfg.ffn == "mlp":
            self.ffn = Mlp(d, int(d * cfg.mlp_ratio))
        else:
            self.ffn = MoE(d, cfg.expert_hidden or d, cfg.experts, cfg.experts_per_token)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x, trace=None):
        a, idx_loss = self.attn(self.norm1(x), trace)
        x = x + self.drop_path(a)
        if isinstance(self.ffn, MoE):
            f, balance = self.ffn(self.norm2(x), trace)
        else:
            f, balance = self.ffn(self.norm2(x)), x.new_zeros(())
        x = x + self.drop_path(f)
        return x, balance, idx_loss


class RecursiveClassifier(nn.Module):
    """forward(img) -> {"logits": [T x (B, C)], "aux_loss": scalar}; forward(img, trace=True) adds "trace"."""

    family = "recursive"

    def __init__(self, cfg: RecursiveConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.dim
        self.encoder = ConvEncoder(cfg.in_chans, cfg.encoder_widths, d)
        self.y0 = nn.Parameter(torch.zeros(d))
        self.z0 = nn.Parameter(torch.zeros(d))
        self.role = nn.Parameter(torch.zeros(3, d))  # role embeddings for x, y, z tokens
        self.class_embed = nn.Parameter(torch.zeros(cfg.num_classes, d))
        dpr = torch.linspace(0, cfg.drop_path, cfg.blocks).tolist()
        self.blocks = nn.ModuleList(Block(cfg, p) for p in dpr)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, cfg.num_classes)
        self.apply(self._init_weights)
        # y0, z0 and the role embeddings start at zero, so at init the y token carries only what it reads
        # from the image token (a constant offset there would swamp the image signal after LayerNorm).
        trunc_normal_(self.class_embed, std=0.02)

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)  # width-aware; std 0.02 is tuned for d = 768 and too small at d = 64
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.LayerNorm, nn.BatchNorm2d)):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    @property
    def num_exits(self) -> int:
        return self.cfg.steps

    def exit_loss_weights(self) -> list[float]:
        T = self.cfg.steps
        if self.cfg.step_loss == "mean" or T == 1:
            return [1.0 / T] * T
        return [self.cfg.earlier_weight / (T - 1)] * (T - 1) + [1.0]

    def embed_prediction(self, logits):
        probs = logits.softmax(-1)
        if self.cfg.embedding == "soft":
            return probs @ self.class_embed
        hard = F.one_hot(probs.argmax(-1), probs.shape[-1]).to(probs.dtype)
        return (hard + probs - probs.detach()) @ self.class_embed  # straight-through

    def forward(self, img, trace: bool = False, steps: int | None = None):
        """Run `steps` recursion steps (default: all); one logits tensor per step."""
        B = img.shape[0]
        x = self.encoder(img) + self.role[0]  # computed once per image
        y = self.y0.expand(B, -1) + self.role[1]
        Z = [self.z0.expand(B, -1)]
        logits_all, aux = [], img.new_zeros(())
        traces = []
        steps = steps or self.cfg.steps
        for t in range(1, steps + 1):
            h = torch.cat([x[:, None], y[:, None], torch.stack(Z, 1) + self.role[2]], dim=1)  # B, t+2, d
            step_trace = {} if trace else None
            for blk in self.blocks:
                h, balance, idx_loss = blk(h, step_trace)
                aux = aux + self.cfg.balance_weight * balance + self.cfg.indexer_kl_weight * idx_loss
            h = self.norm(h)
            logits = self.head(h[:, 1])
            logits_all.append(logits)
            y = self.embed_prediction(logits) + self.role[1]
            Z.append(h[:, -1])
            if trace:
                traces.append(step_trace)
        out = {"logits": logits_all, "aux_loss": aux / (steps * self.cfg.blocks)}
        if trace:
            out["trace"] = summarise_traces(traces, self.cfg)
        return out


def summarise_traces(traces: list[dict], cfg: RecursiveConfig) -> dict:
    """Per step: measured sparsity, expert utilisation (share of assignments), attention mass per token role."""
    sparsity, utilisation, role_mass = [], [], []
    for st in traces:
        sparsity.append(st["masked_pairs"] / st["total_pairs"])
        if "expert_counts" in st:
            counts = torch.stack(st["expert_counts"]).sum(0)
            utilisation.append((counts / counts.sum()).tolist())
        # attention mass each role receives, averaged over queries, blocks and images
        attn = torch.stack(st["attn"]).mean(0)  # B L L
        received = attn.mean(1).mean(0)  # L: mass per key position
        role_mass.append({"x": received[0].item(), "y": received[1].item(), "z": received[2:].sum().item()})
    return {"sparsity": sparsity, "expert_utilisation": utilisation, "role_mass": role_mass}


def formula_sparsity(steps: int, topk: int) -> list[float]:
    """rho_t = max(0, 1 - k / L_t), L_t = t + 2."""
    return [max(0.0, 1.0 - topk / (t + 2)) for t in range(1, steps + 1)]
