"""Model registry: a named config in params.yaml (`models.NAME`) -> a model.

Every model returns {"logits": [one (B, classes) tensor per exit], "aux_loss": scalar} and exposes
`num_exits` and `exit_loss_weights()`, so one engine trains and evaluates both families.
"""
from __future__ import annotations

import dataclasses

from itervision.errors import UserError
from itervision.models.recursive import RecursiveClassifier, RecursiveConfig
from itervision.models.sparseformer import RecurrentSparseFormer, SparseFormerConfig

FAMILIES = {
    "recursive": (RecursiveConfig, RecursiveClassifier),
    "sparseformer": (SparseFormerConfig, RecurrentSparseFormer),
}

# Dataset facts a model needs (classes, channels), known without the data itself.
DATASET_META = {
    "mnist": (10, 1), "fashion_mnist": (10, 1), "cifar10": (10, 3), "cifar100": (100, 3),
    "imagenet100": (100, 3), "imagenet200": (200, 3),
}
NOT_MODEL_KEYS = {"family", "base"}


def model_dataclass(cfg: dict, num_classes: int, in_chans: int):
    family = cfg.get("family")
    if family not in FAMILIES:
        raise UserError(f"model family {family!r} unknown; use one of: {', '.join(FAMILIES)}")
    config_cls, _ = FAMILIES[family]
    fields = {f.name for f in dataclasses.fields(config_cls)}
    kwargs = {k: v for k, v in cfg.items() if k not in NOT_MODEL_KEYS}
    unknown = sorted(set(kwargs) - fields)
    if unknown:
        raise UserError(f"unknown {family} model keys {', '.join(unknown)}; valid keys: {', '.join(sorted(fields))}")
    kwargs.update(num_classes=num_classes, in_chans=in_chans)
    try:
        return config_cls(**kwargs)
    except (ValueError, TypeError) as err:
        raise UserError(f"bad {family} model config: {err}") from None


def build_model(cfg: dict, num_classes: int, in_chans: int):
    config = model_dataclass(cfg, num_classes, in_chans)
    return FAMILIES[cfg["family"]][1](config)


def dataset_meta(dataset: str) -> tuple[int, int]:
    if dataset not in DATASET_META:
        raise UserError(f"unknown dataset '{dataset}'; known: {', '.join(DATASET_META)}")
    return DATASET_META[dataset]
