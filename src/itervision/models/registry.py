"""Model registry: a resolved config (params.model_config: {'family': ..., keys}) -> a model.

Every model answers the same calls, so one engine trains and evaluates all families:
`model(img, exits=n)` -> {"logits": [one (B, C) tensor for each of the first n exits], "aux_loss": scalar},
`model.num_exits`, `model.exit_loss_weights()`, and `model.cfg` (its config dataclass).
"""
from __future__ import annotations

import dataclasses

from itervision.errors import UserError
from itervision.models.configs import FAMILY_CONFIGS
from itervision.models.recursive import EncoderClassifier, RecursiveClassifier
from itervision.models.sparseformer import RecurrentSparseFormer

MODEL_CLASSES = {"recursive": RecursiveClassifier, "encoder": EncoderClassifier,
                 "sparseformer": RecurrentSparseFormer}
assert set(MODEL_CLASSES) == set(FAMILY_CONFIGS)


def build_config(cfg: dict, num_classes: int, in_chans: int):
    """The family's config dataclass from a resolved config dict (already checked by params)."""
    if cfg.get("family") not in FAMILY_CONFIGS:
        raise UserError(f"unknown model family {cfg.get('family')!r} (known: {', '.join(FAMILY_CONFIGS)}); "
                        f"rerun `dvc repro` to regenerate configs/resolved")
    cls = FAMILY_CONFIGS[cfg["family"]]
    fields = {k: (tuple(v) if isinstance(v, list) else v) for k, v in cfg.items() if k != "family"}
    names = {f.name for f in dataclasses.fields(cls)} - {"num_classes", "in_chans"}
    missing, unknown = sorted(names - set(fields)), sorted(set(fields) - names)
    if missing or unknown:  # a config resolved by older code: this code cannot build it as written
        raise UserError(f"the {cfg['family']} model config lacks {missing or 'nothing'} and has unknown keys "
                        f"{unknown or 'none'}; rerun `dvc repro` to regenerate configs/resolved")
    return cls(**fields, num_classes=num_classes, in_chans=in_chans)


def build_model(cfg: dict, num_classes: int, in_chans: int):
    config = build_config(cfg, num_classes, in_chans)
    model = MODEL_CLASSES[cfg["family"]](config)
    model.family = cfg["family"]
    return model
