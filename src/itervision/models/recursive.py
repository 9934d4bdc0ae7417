"""Recursive visual classifier with dynamic sparse attention (DSA) and a mixture-of-experts (MoE) FFN.

Seed document 000. Streams (TRM naming): x = global image embedding (computed once), y = class-hypothesis
token, Z = latent history that grows by one state per step. Step t runs the shared block stack on
h_t = [x; y_{t-1}; Z_{t-1}] (length t + 2) and every step is an exit.

Design choices the summary leaves open (documented in README "Recursive classifier"):
* Encoder stages are conv3x3 -> max-pool 2 -> BatchNorm -> ReLU. Pooling first is the same function as
  conv-BN-ReLU-pool wherever BN's scale is positive, and normalises 4x fewer activations (1.5x faster
  training at CPU scale); parameters and multiply-adds are unchanged.
* z_t is the block-stack output at the newest history position; y_t's logits come from the y position.
* hard embedding: E_cls[argmax] with a straight-through gradient; soft: softmax(logits) @ E_cls.
* DSA indexer: I(t,s) = q̄_t · k_s / sqrt(d_h), q̄ = head-averaged query, k = the shared (multi-query) key,
  so it has no parameters of its own (this is what reproduces the paper's 7.10M active parameters). Its
  selection scores learn through an auxiliary KL(dense head-averaged attention ‖ softmax(I)) with weight
  `indexer_kl_weight`, computed only in training, as in DeepSeek-V3.2's indexer warm-up.
  Two kernels give the same attention: `gathered` copies the k selected keys per query and scores only them;
  `masked` computes one score product in a keys-first layout that serves the indexer, the masked attention
  and the KL target, with every softmax over dim 1 (torch's CPU softmax over a last dim of 3-18 is ~8x
  slower). The multiply-add accounting counts k keys for both, and so does fvcore: under torch.jit tracing
  (FLOP counting) both run the gathered products.
* MoE: E experts d -> d -> d with stacked weights. Dispatch sorts the N * m (token, expert) assignments by
  expert, gathers them into a buffer padded to the largest count (index_select), runs one batched matmul per
  layer and gathers the outputs back. Under torch.jit tracing (FLOP counting) it runs the exact per-expert
  products instead, so fvcore counts what each expert computes and not the padding.
* MoE balancing: Switch form over the m choices, E · Σ_i f_i P_i, which equals 1 at uniform routing.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from itervision.models.configs import EncoderConfig, RecursiveConfig
from itervision.models.layers import DropPath, Mlp, attend

ROLES = ("x", "y", "z")


class ConvEncoder(nn.Module):
    """Conv3x3 -> max-pool 2 -> BN -> ReLU per stage, global average pooling, projection to width d."""

    def __init__(self, in_chans: int, widths: tuple, dim: int):
        super().__init__()
        layers, c = [], in_chans
        for w in widths:
            layers += [nn.Conv2d(c, w, 3, padding=1), nn.MaxPool2d(2), nn.BatchNorm2d(w), nn.ReLU(inplace=True)]
            c = w
        self.features = nn.Sequential(*layers)
        self.proj = nn.Linear(c, dim)

    def forward(self, img):
        # channels_last: 1.8x faster encoder training here. The owning model stores the conv weights in
        # channels_last; the input's layout alone decides nothing for one channel (a 1-channel image is
        # contiguous in both layouts), and NCHW outputs would send max-pool down its slow path (10x here).
        f = self.features(img.contiguous(memory_format=torch.channels_last))
        return self.proj(f.mean(dim=(2, 3)))


class RecursiveAttention(nn.Module):
    """Dense multi-head attention, or DSA: top-k keys per query chosen by an indexer, one shared K/V head."""

    def __init__(self, dim: int, heads: int, mode: str, topk: int | None = None, kernel: str | None = "masked"):
        super().__init__()
        self.heads, self.head_dim, self.mode, self.topk, self.kernel = heads, dim // heads, mode, topk, kernel
        kv_dim = dim if mode == "dense" else self.head_dim  # multi-query: K and V shared by all heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, kv_dim)
        self.v = nn.Linear(dim, kv_dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, trace: dict | None = None):
        B, L, D = x.shape
        H, dh = self.heads, self.head_dim
        aux = x.new_zeros(())
        keep, need = L, trace is not None
        if self.mode == "dense":
            q = self.q(x).view(B, L, H, dh).transpose(1, 2)  # B H L dh
            k = self.k(x).view(B, L, H, dh).transpose(1, 2)
            v = self.v(x).view(B, L, H, dh).transpose(1, 2)
            out, attn = attend(q, k, v, weights=need)
            out = out.transpose(1, 2).reshape(B, L, D)
        else:
            keep = min(self.topk, L)  # dense whenever L <= k
            q, k, v = self.q(x), self.k(x), self.v(x)  # B L D, B L dh, B L dh (one shared K/V head)
            if self.kernel == "gathered" or torch.jit.is_tracing():  # tracing: FLOP counts of the k keys
                out, attn, index, dense = self._gathered(q, k, v, keep, need)
                dim = -1
            else:
                out, attn, index, dense = self._masked(q, k, v, keep, need)
                dim = 1
            if self.training:
                # Indexer alignment: KL(dense head-averaged attention (detached) || softmax(index scores)).
                aux = F.kl_div(index.log_softmax(dim), dense, reduction="sum") / (B * L)
        if trace is not None:
            trace["masked_pairs"] = trace.get("masked_pairs", 0) + B * L * (L - keep)
            trace["total_pairs"] = trace.get("total_pairs", 0) + B * L * L
            trace.setdefault("attn", []).append(attn.detach().mean(1))  # B L L (query, key), head-averaged
        return self.proj(out), aux

    def _masked(self, q, k, v, keep: int, need: bool):
        """Keys-first layout: ONE score product s (B, L_keys, L_queries * H) serves the indexer (its mean over
        heads, which equals q̄ · k), the masked attention and the detached dense KL target, and every softmax
        runs over dim 1 (keys). torch's CPU softmax over a last dim of 3-18 keys is ~8x slower than over
        dim 1 with the queries contiguous (make benchmark: DSA kernels), which is why this is written out
        instead of calling the fused attention with a mask."""
        B, L, D = q.shape
        H, dh = self.heads, self.head_dim
        s = (k @ q.view(B, L * H, dh).transpose(1, 2)) * dh ** -0.5  # B Lk (Lq H)
        index = s.view(B, L, L, H).mean(-1)  # B Lk Lq: indexer scores
        if keep < L:
            sel = index.topk(keep, dim=1).indices.unsqueeze(-1)  # B keep Lq 1
            drop = torch.ones(B, L, L, 1, dtype=torch.bool, device=q.device).scatter_(1, sel, False)
            p = s.view(B, L, L, H).masked_fill(drop, float("-inf")).view(B, L, L * H).softmax(1)
        else:
            p = s.softmax(1)
        out = (p.transpose(1, 2) @ v).view(B, L, D)  # (B, Lq H, Lk) @ (B, Lk, dh)
        dense = None
        if self.training:
            with torch.no_grad():
                dense = (p if keep == L else s.softmax(1)).view(B, L, L, H).mean(-1)
        attn = p.view(B, L, L, H).permute(0, 3, 2, 1) if need else None  # B H Lq Lk
        return out, attn, index, dense

    def _gathered(self, q, k, v, keep: int, need: bool):
        """Copies the k selected keys and values per query and scores only them (queries-first layout)."""
        B, L, D = q.shape
        H, dh = self.heads, self.head_dim
        scale = dh ** -0.5
        q = q.view(B, L, H, dh).transpose(1, 2)  # B H L dh
        index = (q.mean(1) @ k.transpose(-2, -1)) * scale  # B Lq Lk: indexer scores, head-averaged query
        sel = index.topk(keep, dim=-1).indices  # B L keep
        idx = sel.unsqueeze(-1).expand(-1, -1, -1, dh)
        k_sel = torch.gather(k.unsqueeze(1).expand(B, L, L, dh), 2, idx)  # B L keep dh
        v_sel = torch.gather(v.unsqueeze(1).expand(B, L, L, dh), 2, idx)
        part = (torch.einsum("bhld,blkd->bhlk", q, k_sel) * scale).softmax(-1)
        out = torch.einsum("bhlk,blkd->bhld", part, v_sel).transpose(1, 2).reshape(B, L, D)
        attn = None if not need else torch.zeros(B, H, L, L, dtype=part.dtype, device=part.device) \
            .scatter(3, sel.unsqueeze(1).expand(-1, H, -1, -1), part)
        dense = None
        if self.training:
            with torch.no_grad():
                dense = (q @ k.unsqueeze(1).transpose(-2, -1) * scale).softmax(-1).mean(1)
        return out, attn, index, dense


class MoE(nn.Module):
    """Top-m of E experts (d -> hidden -> d, GELU) per token, softmax router, batched dispatch."""

    def __init__(self, dim: int, hidden: int, experts: int, top: int):
        super().__init__()
        self.num_experts, self.top = experts, top
        self.router = nn.Linear(dim, experts)
        self.w1 = nn.Parameter(torch.empty(experts, dim, hidden))
        self.b1 = nn.Parameter(torch.zeros(experts, hidden))
        self.w2 = nn.Parameter(torch.empty(experts, hidden, dim))
        self.b2 = nn.Parameter(torch.zeros(experts, dim))
        for w in (self.w1, self.w2):  # each expert as a Linear with Xavier init
            for e in range(experts):
                nn.init.xavier_uniform_(w.data[e].T)

    def route(self, x2d):
        probs = self.router(x2d).softmax(-1)  # N E
        weight, idx = probs.topk(self.top, dim=-1)  # N m
        return probs, weight / weight.sum(-1, keepdim=True), idx

    def expert(self, e: int, x):
        return torch.addmm(self.b2[e], F.gelu(torch.addmm(self.b1[e], x, self.w1[e])), self.w2[e])

    def forward(self, x, trace: dict | None = None):
        shape = x.shape
        x2d = x.reshape(-1, shape[-1])
        N, E, m = x2d.shape[0], self.num_experts, self.top
        probs, weight, idx = self.route(x2d)
        n_assign = idx.numel()
        flat = idx.reshape(-1)  # assignment a = token * m + slot
        counts = torch.bincount(flat, minlength=E)
        if torch.jit.is_tracing():  # FLOP counting: each expert on exactly its own tokens, no padding
            out = torch.zeros_like(x2d)
            for e in range(E):
                token, slot = (idx == e).nonzero(as_tuple=True)
                out = out.index_add(0, token, self.expert(e, x2d[token]) * weight[token, slot, None])
        else:
            cap = int(counts.max())  # rows per expert in the padded buffer
            order = flat.argsort(stable=True)  # assignments sorted by expert
            expert_of = flat[order]
            start = torch.cumsum(counts, 0) - counts
            row = expert_of * cap + torch.arange(n_assign, device=x.device) - start[expert_of]  # buffer row
            where = torch.empty_like(row).scatter_(0, order, row)  # buffer row of each assignment, token order
            source = torch.full((E * cap,), N, dtype=torch.long, device=x.device).scatter_(0, row, order // m)
            # Gathers (index_select; backward: one index_add) rather than indexed assignment into a zero
            # buffer, whose backward is an accumulating index_put (3x slower here). Padding rows read the
            # appended zero row N and are never read back. (Per-expert matmuls on the sorted rows skip the
            # padding but were slower in the whole model here; make benchmark: MoE dispatch.)
            buf = torch.cat([x2d, x2d.new_zeros(1, shape[-1])]).index_select(0, source).view(E, cap, -1)
            h = F.gelu(torch.baddbmm(self.b1[:, None], buf, self.w1))  # E, cap, hidden: one matmul per layer
            y = torch.baddbmm(self.b2[:, None], h, self.w2).view(E * cap, -1)
            y = y.index_select(0, where).view(N, m, -1)  # (token, slot) order
            out = (y * weight[..., None].to(y.dtype)).sum(1).to(x2d.dtype)
        f = counts.to(x.dtype) / n_assign  # share of the N*m assignments per expert
        balance = self.num_experts * (f * probs.mean(0)).sum()
        if trace is not None:
            trace.setdefault("expert_counts", []).append(counts.detach())
        return out.reshape(shape), balance


class Block(nn.Module):
    def __init__(self, cfg: RecursiveConfig, drop_path: float):
        super().__init__()
        d = cfg.dim
        self.norm1 = nn.LayerNorm(d)
        self.attn = RecursiveAttention(d, cfg.heads, cfg.attention, cfg.topk, cfg.dsa_kernel)
        self.norm2 = nn.LayerNorm(d)
        if cfg.ffn == "mlp":
            self.ffn = Mlp(d, int(d * cfg.mlp_ratio))
        else:
            self.ffn = MoE(d, d, cfg.experts, cfg.experts_per_token)  # experts are d -> d -> d
        self.drop_path = DropPath(drop_path)

    def forward(self, x, trace=None):
        a, idx_loss = self.attn(self.norm1(x), trace)
        x = x + self.drop_path(a)
        if isinstance(self.ffn, MoE):
            f, balance = self.ffn(self.norm2(x), trace)
        else:
            f, balance = self.ffn(self.norm2(x)), x.new_zeros(())
        x = x + self.drop_path(f)
        return x, balance, idx_loss


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


class RecursiveClassifier(nn.Module):
    """forward(img, exits=None, trace=False) -> {"logits": [one (B, C) per step], "aux_loss": scalar}."""

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
        self.apply(_init_weights)
        # y0, z0 and the role embeddings start at zero, so at init the y token carries only what it reads
        # from the image token (a constant offset there would swamp the image signal after LayerNorm).
        nn.init.trunc_normal_(self.class_embed, std=0.02)
        self.encoder.to(memory_format=torch.channels_last)  # see ConvEncoder.forward

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

    def forward(self, img, exits: int | None = None, trace: bool = False):
        """Run the first `exits` recursion steps (default: all); one logits tensor per step."""
        B = img.shape[0]
        x = self.encoder(img) + self.role[0]  # computed once per image
        y = self.y0.expand(B, -1) + self.role[1]
        Z = [self.z0.expand(B, -1)]
        logits_all, aux, traces = [], img.new_zeros(()), []
        steps = exits or self.cfg.steps
        for t in range(1, steps + 1):
            h = torch.cat([x[:, None], y[:, None], torch.stack(Z, 1) + self.role[2]], dim=1)  # B, t+2, d
            step_trace = {} if trace else None
            for blk in self.blocks:
                h, balance, idx_loss = blk(h, step_trace)
                aux = aux + (self.cfg.balance_weight or 0.0) * balance + (self.cfg.indexer_kl_weight or 0.0) * idx_loss
            h = self.norm(h)
            logits = self.head(h[:, 1])
            logits_all.append(logits)
            y = self.embed_prediction(logits) + self.role[1]
            Z.append(h[:, -1])
            if trace:
                traces.append(step_trace)
        out = {"logits": logits_all, "aux_loss": aux / (steps * self.cfg.blocks)}
        if trace:
            out["trace"] = summarise_traces(traces)
        return out


class EncoderClassifier(nn.Module):
    """The recursive classifier's conv encoder, LayerNorm and a linear head: no recursion, one exit."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = ConvEncoder(cfg.in_chans, cfg.encoder_widths, cfg.dim)
        self.norm = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.num_classes)
        self.apply(_init_weights)
        self.encoder.to(memory_format=torch.channels_last)  # see ConvEncoder.forward

    num_exits = 1

    def exit_loss_weights(self) -> list[float]:
        return [1.0]

    def forward(self, img, exits: int | None = None):
        return {"logits": [self.head(self.norm(self.encoder(img)))], "aux_loss": img.new_zeros(())}


def summarise_traces(traces: list[dict]) -> dict:
    """Per step: measured sparsity, expert utilisation (share of assignments), attention mass per token role."""
    sparsity, utilisation, role_mass = [], [], []
    for st in traces:
        sparsity.append(st["masked_pairs"] / st["total_pairs"])
        if "expert_counts" in st:
            counts = torch.stack(st["expert_counts"]).sum(0).double()
            utilisation.append((counts / counts.sum()).tolist())
        # attention mass each role receives, averaged over queries, blocks and images
        attn = torch.stack(st["attn"]).mean(0)  # B L L
        received = attn.mean(1).mean(0)  # L: mass per key position
        role_mass.append({"x": received[0].item(), "y": received[1].item(), "z": received[2:].sum().item()})
    return {"sparsity": sparsity, "expert_utilisation": utilisation, "role_mass": role_mass}

