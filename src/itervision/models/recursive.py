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
* MoE: E experts d -> h -> d with stacked weights, top-m softmax routing. Two kernels, the same function
  (tested against a loop over experts, forward and gradients, fp32 1e-5):
  `dense` computes every expert on every token as ONE gated MLP: the hidden units of expert e are scaled by the
  token's routing weight for e (zero for the experts it does not use), so the block is two matrix products
  (E x the expert work of a token). No host read; E/m times the routed work.
  `grouped` runs exactly the routed (token, expert) pairs: the N*m assignments sorted by expert (argsort, on the
  device), torch._grouped_mm with device-side offsets, weighted scatter-add back. The number of pairs is static
  (N*m), so it reads nothing back to the host either: a step compiles as one graph and runs under CUDA graphs.
  On CUDA it runs under bf16 autocast (fp32 without autocast falls back to `dense`); on the CPU in the input's
  dtype.
  The CPU scale keeps `dense`, chosen by measurement (docs/performance.md: whole CPU-scale runs, DSA-MoE against
  SA-MLP, dense 1.11 and 1.18, grouped 1.22 and 1.26, a padded batched-matmul dispatch 1.16 and 1.18).
  Under torch.jit tracing (FLOP counting) every kernel runs the exact per-expert products, so fvcore counts
  what each expert computes.
* MoE balancing: Switch form over the m choices, E · Σ_i f_i P_i, which equals 1 at uniform routing.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from itervision.models.configs import EncoderConfig, RecursiveConfig
from itervision.models.layers import DropPath, Mlp, attend, exit_loss_weights, init_weights

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
        self.kv_dim = dim if mode == "dense" else self.head_dim  # multi-query: K and V shared by all heads
        self.qkv = nn.Linear(dim, dim + 2 * self.kv_dim)  # Q, K and V in one product
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, trace: dict | None = None):
        B, L, D = x.shape
        H, dh = self.heads, self.head_dim
        aux = None  # the indexer's alignment loss (DSA, training only)
        keep, need = L, trace is not None
        q, k, v = self.qkv(x).split((D, self.kv_dim, self.kv_dim), dim=-1)
        if self.mode == "dense":
            q, k, v = (t.reshape(B, L, H, dh).transpose(1, 2) for t in (q, k, v))  # B H L dh
            out, attn = attend(q, k, v, weights=need)
            out = out.transpose(1, 2).reshape(B, L, D)
        else:
            keep = min(self.topk, L)  # dense whenever L <= k (L is a shape: no host read)
            # q: B L D; k, v: B L dh (one shared K/V head)
            if self.kernel == "gathered" or torch.jit.is_tracing():  # tracing: FLOP counts of the k keys
                out, attn, index, dense = self._gathered(q, k, v, keep, need)
                dim = -1
            else:
                out, attn, index, dense = self._masked(q, k, v, keep, need)
                dim = 1
            if self.training:
                # Indexer alignment: KL(dense head-averaged attention (detached) || softmax(index scores)), as the
                # cross-entropy -sum(dense * log softmax(index)): the KL less the detached target's entropy, a
                # constant, so the same gradients in fewer ops
                aux = (dense * index.log_softmax(dim)).sum() * (-1.0 / (B * L))
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
        s = (k @ q.reshape(B, L * H, dh).transpose(1, 2)) * dh ** -0.5  # B Lk (Lq H)
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
        q = q.reshape(B, L, H, dh).transpose(1, 2)  # B H L dh
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
    """Top-m of E experts (d -> hidden -> d, GELU) per token, softmax router, weights renormalised over the m;
    the `dense` or `grouped` kernel (module docstring). Expert e's first layer is w1[e] (hidden x d) and b1[e],
    its second w2[e] (hidden x d, applied as h @ w2[e]) and b2[e]."""

    def __init__(self, dim: int, hidden: int, experts: int, top: int, kernel: str = "dense"):
        super().__init__()
        self.num_experts, self.top, self.hidden, self.kernel = experts, top, hidden, kernel
        self.router = nn.Linear(dim, experts)
        self.w1 = nn.Parameter(torch.empty(experts, hidden, dim))
        self.b1 = nn.Parameter(torch.zeros(experts, hidden))
        self.w2 = nn.Parameter(torch.empty(experts, hidden, dim))
        self.b2 = nn.Parameter(torch.zeros(experts, dim))
        for w in (self.w1, self.w2):  # each expert layer as a Linear with Xavier init
            for e in range(experts):
                nn.init.xavier_uniform_(w.data[e])

    def route(self, x2d):
        """(router probabilities N x E, weights of the top m renormalised over them N x m, their experts N x m).
        The softmax of the top-m logits equals the top-m probabilities renormalised, in fewer ops."""
        logits = self.router(x2d)
        top, idx = logits.topk(self.top, dim=-1)
        return logits.softmax(-1), top.softmax(-1), idx

    def expert(self, e: int, x):
        return F.gelu(x @ self.w1[e].t() + self.b1[e]) @ self.w2[e] + self.b2[e]

    def forward(self, x, trace: dict | None = None):
        shape = x.shape
        x2d = x.reshape(-1, shape[-1])
        probs, weight, idx = self.route(x2d)
        gate = torch.zeros_like(probs).scatter(1, idx, weight)  # N E: the routing weight, 0 off the top m
        counts = (gate > 0).sum(0).to(probs.dtype)  # assignments per expert (softmax weights are never 0)
        if torch.jit.is_tracing():  # FLOP counting: each expert on exactly its own tokens
            out = self._per_expert(x2d, weight, idx)
        elif self.kernel == "grouped" and not (x.is_cuda and not torch.is_autocast_enabled("cuda")):
            out = self._grouped(x2d, weight, idx, counts)
        else:
            out = self._dense(x2d, gate)
        # Switch balancing over the m choices: E * sum_i f_i P_i, f_i the share of the N*m assignments (the
        # constant folded into the counts, which carry no gradient)
        balance = (counts * (self.num_experts / idx.numel()) * probs.mean(0)).sum()
        if trace is not None:
            trace.setdefault("expert_counts", []).append(counts.detach())
        return out.reshape(shape), balance

    def _dense(self, x2d, gate):
        """Every expert on every token as one gated MLP: hidden units of expert e scaled by the routing weight."""
        N, E, Hd = x2d.shape[0], self.num_experts, self.hidden
        h = F.gelu(F.linear(x2d, self.w1.reshape(E * Hd, -1), self.b1.reshape(-1)))  # N, E*hidden
        h = (h.view(N, E, Hd) * gate.to(h.dtype)[..., None]).view(N, E * Hd)
        return h @ self.w2.reshape(E * Hd, -1).to(h.dtype) + gate.to(h.dtype) @ self.b2.to(h.dtype)

    def _grouped(self, x2d, weight, idx, counts):
        """Exactly the routed (token, expert) pairs: sorted by expert, torch._grouped_mm with device-side offsets."""
        flat = idx.reshape(-1)
        order = flat.argsort(stable=True)  # the N*m assignments sorted by expert, on the device
        token, expert_of = order // self.top, flat[order]
        offsets = counts.to(torch.int32).cumsum(0, dtype=torch.int32)  # end of each expert's rows (device-side)
        device = x2d.device.type
        dt = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x2d.dtype
        xs = x2d.index_select(0, token).to(dt)
        h = torch._grouped_mm(xs, self.w1.transpose(1, 2).to(dt), offs=offsets) + self.b1[expert_of].to(dt)
        y = torch._grouped_mm(F.gelu(h), self.w2.to(dt), offs=offsets) + self.b2[expert_of].to(dt)
        y = y * weight.reshape(-1)[order, None].to(dt)
        return torch.zeros_like(x2d, dtype=dt).index_add_(0, token, y)

    def _per_expert(self, x2d, weight, idx):
        out = torch.zeros_like(x2d)
        for e in range(self.num_experts):
            token, slot = (idx == e).nonzero(as_tuple=True)
            out = out.index_add(0, token, self.expert(e, x2d[token]) * weight[token, slot, None])
        return out


class Block(nn.Module):
    """Pre-LN transformer block of the recursion: attention (dense or DSA), then FFN (MLP or MoE)."""

    def __init__(self, dim: int, heads: int, *, attention: str, topk: int | None, dsa_kernel: str | None, ffn: str,
                 mlp_ratio: float | None, experts: int | None, experts_per_token: int | None,
                 moe_kernel: str | None, balance_weight: float | None, indexer_kl_weight: float | None,
                 drop_path: float):
        super().__init__()
        self.balance_weight, self.indexer_kl_weight = balance_weight or 0.0, indexer_kl_weight or 0.0
        self.norm1 = nn.LayerNorm(dim)
        self.attn = RecursiveAttention(dim, heads, attention, topk, dsa_kernel)
        self.norm2 = nn.LayerNorm(dim)
        if ffn == "mlp":
            self.ffn = Mlp(dim, int(dim * mlp_ratio))
        else:
            self.ffn = MoE(dim, dim, experts, experts_per_token, moe_kernel)  # experts are d -> d -> d
        self.drop_path = DropPath(drop_path)

    def forward(self, x, trace=None):
        """(x, the block's weighted auxiliary loss or None when it has none)."""
        aux = []
        a, idx_loss = self.attn(self.norm1(x), trace)
        x = x + self.drop_path(a)
        if idx_loss is not None and self.indexer_kl_weight:
            aux.append(self.indexer_kl_weight * idx_loss)
        if isinstance(self.ffn, MoE):
            f, balance = self.ffn(self.norm2(x), trace)
            if self.balance_weight:
                aux.append(self.balance_weight * balance)
        else:
            f = self.ffn(self.norm2(x))
        x = x + self.drop_path(f)
        return x, (aux[0] if len(aux) == 1 else sum(aux) if aux else None)


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
        self.blocks = nn.ModuleList(
            Block(d, cfg.heads, attention=cfg.attention, topk=cfg.topk, dsa_kernel=cfg.dsa_kernel, ffn=cfg.ffn,
                  mlp_ratio=cfg.mlp_ratio, experts=cfg.experts, experts_per_token=cfg.experts_per_token,
                  moe_kernel=cfg.moe_kernel, balance_weight=cfg.balance_weight,
                  indexer_kl_weight=cfg.indexer_kl_weight, drop_path=p) for p in dpr)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, cfg.num_classes)
        self.apply(init_weights)
        # y0, z0 and the role embeddings start at zero, so at init the y token carries only what it reads
        # from the image token (a constant offset there would swamp the image signal after LayerNorm).
        # The class embeddings start at unit scale (norm about sqrt(d), like the LayerNorm-ed tokens they sit
        # beside) and are not weight-decayed (no_weight_decay): at std 0.02 and decayed they trained to a norm of
        # about 0.24 against about 8 for the other tokens, and the prediction fed back into the next step barely
        # mattered (a wrong y moved final top-1 by <= 0.6 points; docs/ledger.md "one pass").
        nn.init.trunc_normal_(self.class_embed, std=1.0, a=-2.0, b=2.0)
        self.encoder.to(memory_format=torch.channels_last)  # see ConvEncoder.forward

    @property
    def num_exits(self) -> int:
        return self.cfg.steps

    def no_weight_decay(self) -> set[str]:
        """The class embeddings: a lookup table whose scale is the feedback's strength (see __init__)."""
        return {"class_embed"}

    def exit_loss_weights(self) -> list[float]:
        return exit_loss_weights(self.cfg.steps, self.cfg.earlier_weight if self.cfg.step_loss == "last_plus" else None)

    def embed_prediction(self, logits):
        probs = logits.softmax(-1)
        if self.cfg.embedding == "soft":
            return probs @ self.class_embed
        # one-hot by scatter: F.one_hot checks its indices' range on the host (a device sync per step)
        hard = torch.zeros_like(probs).scatter_(-1, probs.argmax(-1, keepdim=True), 1.0)
        return (hard + probs - probs.detach()) @ self.class_embed  # straight-through

    def forward(self, img, exits: int | None = None, trace: bool = False, y_given=None):
        """Run the first `exits` recursion steps (default: all); one logits tensor per step. y_given (B,) class
        indices: feed these classes' embeddings as y from step 2 on instead of the model's own predictions (the
        feedback probe of evaluation/predict.py: does y matter?)."""
        B = img.shape[0]
        x = self.encoder(img) + self.role[0]  # computed once per image
        y = self.y0.expand(B, -1) + self.role[1]
        Z = [self.z0.expand(B, -1)]
        logits_all, aux, traces = [], [], []
        steps = exits or self.cfg.steps
        for t in range(1, steps + 1):
            h = torch.cat([x[:, None], y[:, None], torch.stack(Z, 1) + self.role[2]], dim=1)  # B, t+2, d
            step_trace = {} if trace else None
            for blk in self.blocks:
                h, block_aux = blk(h, step_trace)
                if block_aux is not None:
                    aux.append(block_aux)
            h = self.norm(h)
            logits = self.head(h[:, 1])
            logits_all.append(logits)
            y = (self.embed_prediction(logits) if y_given is None else self.class_embed[y_given]) + self.role[1]
            Z.append(h[:, -1])
            if trace:
                traces.append(step_trace)
        # the auxiliary losses (MoE balancing, indexer alignment): mean over the block calls, summed once
        aux_loss = torch.stack(aux).sum() / (steps * self.cfg.blocks) if aux else img.new_zeros(())
        out = {"logits": logits_all, "aux_loss": aux_loss}
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
        self.apply(init_weights)
        self.encoder.to(memory_format=torch.channels_last)  # see ConvEncoder.forward

    num_exits = 1

    def exit_loss_weights(self) -> list[float]:
        return exit_loss_weights(1, None)

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

