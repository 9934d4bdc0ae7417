"""Model registry: a resolved config (params.model_config: {'family': ..., keys}) -> a model.

Every model answers the same calls, so one engine trains and evaluates all families:
`model(img, exits=n)` -> {"logits": [one (B, C) tensor for each of the first n exits], "aux_loss": scalar},
`model.num_exits`, `model.exit_loss_weights()`, and `model.cfg` (its config dataclass).
"""
from __future__ import annotations

from itervision.models.configs import FAMILY_CONFIGS
from itervision.models.recursive import EncoderClassifier, RecursiveClassifier
from itervision.models.sparseformer import RecurrentSparseFormer

MODEL_CLASSES = {"recursive": RecursiveClassifier, "encoder": EncoderClassifier,
                 "sparseformer": RecurrentSparseFormer}
assert set(MODEL_CLASSES) == set(FAMILY_CONFIGS)


def build_config(cfg: dict, num_classes: int, in_chans: int):
    """The family's config dataclass from a resolved config dict (already checked by params)."""
    fields = {k: (tuple(v) if isinstance(v, list) else v) for k, v in cfg.items() if k != "family"}
    return FAMILY_CONFIGS[cfg["family"]](**fields, num_classes=num_classes, in_chans=in_chans)


def build_model(cfg: dict, num_classes: int, in_chans: int):
    model = MODEL_CLASSES[cfg["family"]](build_config(cfg, num_classes, in_chans))
    model.family = cfg["family"]
    return model
