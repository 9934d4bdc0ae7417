"""Model configurations as data: one frozen dataclass per family, which is also its params schema.

Kept apart from the model code so that params.yaml is checked without importing torch (a typo fails in well
under a second). Every architecture key is required: a key missing from params is an error, never a silent
paper-size default. Keys that apply only to some variants (`when=`) are required there and None elsewhere,
so a value that cannot matter to a model never enters its resolved config (and never retrains it).
`num_classes` and `in_chans` come from the dataset, not from params.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from itervision.schema import key

_DSA = dict(when=lambda v: v.get("attention") == "dsa", hint="needed with attention: dsa")
_MOE = dict(when=lambda v: v.get("ffn") == "moe", hint="needed with ffn: moe")
_MLP = dict(when=lambda v: v.get("ffn") == "mlp", hint="needed with ffn: mlp")
_LAST_PLUS = dict(when=lambda v: v.get("step_loss") == "last_plus", hint="needed with step_loss: last_plus")


def _check_encoder(img_size: int, widths: tuple[int, ...]):
    """The conv encoder halves the image once per stage, so the image must survive every pooling."""
    if len(widths) < 1:
        raise ValueError("encoder_widths needs at least one stage")
    if img_size < 2 ** len(widths):
        raise ValueError(f"img_size {img_size} is below 2^{len(widths)} (one 2x pooling per encoder stage)")


@dataclass(frozen=True, kw_only=True)
class RecursiveConfig:
    """Recursive DSA-MoE classifier (seed document 000)."""
    img_size: int = key(8, doc="input resolution (px)")
    encoder_widths: tuple[int, ...] = key(1, doc="channels of the three conv-pool stages")
    dim: int = key(1, doc="token width d")
    heads: int = key(1)
    blocks: int = key(1, doc="transformer blocks applied at every step")
    steps: int = key(1, doc="recursion steps T (every step is an exit)")
    attention: str = key(choices=("dense", "dsa"))
    topk: int | None = key(1, **_DSA)
    dsa_kernel: str | None = key(choices=("masked", "gathered"), **_DSA)
    ffn: str = key(choices=("mlp", "moe"))
    mlp_ratio: float | None = key(0, open_lo=True, **_MLP)
    experts: int | None = key(1, **_MOE)
    experts_per_token: int | None = key(1, **_MOE)
    moe_kernel: str | None = key(choices=("dense", "grouped"), **_MOE)
    balance_weight: float | None = key(0, **_MOE)
    indexer_kl_weight: float | None = key(0, **_DSA)
    embedding: str = key(choices=("hard", "soft"))
    drop_path: float = key(0, 1)
    step_loss: str = key(choices=("mean", "last_plus"))
    earlier_weight: float | None = key(0, **_LAST_PLUS)
    num_classes: int = key(2, default=10)
    in_chans: int = key(1, default=3)

    def check(self):
        _check_encoder(self.img_size, self.encoder_widths)
        if self.dim % self.heads:
            raise ValueError(f"dim {self.dim} is not divisible by heads {self.heads}")
        if self.ffn == "moe" and self.experts_per_token > self.experts:
            raise ValueError(f"experts_per_token {self.experts_per_token} exceeds experts {self.experts}")


@dataclass(frozen=True, kw_only=True)
class EncoderConfig:
    """Encoder-only baseline: the recursive classifier's conv encoder and a linear head, no recursion."""
    img_size: int = key(8)
    encoder_widths: tuple[int, ...] = key(1)
    dim: int = key(1)
    num_classes: int = key(2, default=10)
    in_chans: int = key(1, default=3)

    def check(self):
        _check_encoder(self.img_size, self.encoder_widths)


def _is_square(n: int) -> bool:
    return n >= 1 and math.isqrt(n) ** 2 == n


_MEMORY = dict(when=lambda v: bool(v.get("memory")) and len(v.get("rounds") or ()) > 1,
               hint="needed with memory: true and several rounds")
_ROUNDS = dict(when=lambda v: len(v.get("rounds") or ()) > 1, hint="needed with several rounds")


@dataclass(frozen=True, kw_only=True)
class SparseFormerConfig:
    """(Recurrent) SparseFormer (seed document 003); one round is the static model."""
    img_size: int = key(8)
    stem_channels: int = key(1)
    stem_kernel: int = key(1)
    stem_stride: int = key(1)
    stem_pool: bool = key()
    rounds: tuple[int, ...] = key(1, pattern=lambda r: len(r) >= 1 and all(_is_square(n) for n in r),
                                  hint="non-empty, each a perfect square (boxes tile a g x g grid)")
    points: int = key(1, doc="sampling points per token")
    focus_dim: int = key(1)
    focus_heads: int = key(1)
    focus_iters: int = key(1)
    cortex_dim: int = key(1)
    cortex_heads: int = key(1)
    cortex_depth: int = key(1)
    cortex_first_samples: bool = key()
    mlp_ratio: float = key(0, open_lo=True)
    memory: bool = key()
    memory_at: int | None = key(0, **_MEMORY)
    memory_heads: int | None = key(1, **_MEMORY)
    drop_path: float = key(0, 1)
    earlier_weight: float | None = key(0, **_ROUNDS)
    num_classes: int = key(2, default=200)
    in_chans: int = key(1, default=3)

    def check(self):
        for dim, heads, what in ((self.focus_dim, self.focus_heads, "focus"),
                                 (self.cortex_dim, self.cortex_heads, "cortex")):
            if dim % heads:
                raise ValueError(f"{what} width {dim} is not divisible by {heads} heads")
        if self.memory_at is not None:
            if self.memory_at >= self.cortex_depth:
                raise ValueError(f"memory_at {self.memory_at} must index a cortex block (depth {self.cortex_depth})")
            if self.cortex_dim % self.memory_heads:
                raise ValueError(f"cortex width {self.cortex_dim} is not divisible by {self.memory_heads} memory heads")


@dataclass(frozen=True)
class Family:
    """A model family: its config class, and the module and class of its model. The module is imported only when
    a model of the family is built (models/registry.py), so a run's code is its own family's file: the generated
    DVC files declare exactly that file, and editing one family's model retrains no other family."""
    config: type
    module: str
    model: str


# models.NAME.family (default: its architecture's family) picks one
FAMILIES = {"recursive": Family(RecursiveConfig, "itervision.models.recursive", "RecursiveClassifier"),
            "encoder": Family(EncoderConfig, "itervision.models.recursive", "EncoderClassifier"),
            "sparseformer": Family(SparseFormerConfig, "itervision.models.sparseformer", "RecurrentSparseFormer")}
FAMILY_CONFIGS = {name: f.config for name, f in FAMILIES.items()}
