"""Model registry: a checked family config -> a model.

Every model answers the same calls, so one engine trains and evaluates all families:
`model(img, exits=n)` -> {"logits": [one (B, C) tensor for each of the first n exits], "aux_loss": scalar},
`model.num_exits`, `model.exit_loss_weights()`, and `model.cfg` (its config dataclass).

A family's module is imported only when one of its models is built: a SparseFormer run never imports the
recursive classifier's file, so that file is no code dependency of SparseFormer stages (configs.FAMILIES).
"""
from __future__ import annotations

import dataclasses
import importlib

from itervision.errors import UserError
from itervision.models.configs import FAMILIES, FAMILY_CONFIGS
from itervision.schema import parse

REGENERATE = "rerun `dvc repro configure` to regenerate configs/resolved"


def family_of(config) -> str:
    for name, family in FAMILIES.items():
        if type(config) is family.config:
            return name
    raise TypeError(f"{type(config).__name__} is no model family's config")


def config_from_dict(resolved: dict, num_classes: int, in_chans: int, source: str = "a resolved config"):
    """The family's config dataclass from a resolved config ({'family': ..., every key}), checked by the same
    schema as params.yaml; a config written by other code is one line naming what differs."""
    family = resolved.get("family")
    if family not in FAMILY_CONFIGS:
        raise UserError(f"{source}: unknown model family {family!r} (known: {', '.join(FAMILY_CONFIGS)}); "
                        f"{REGENERATE}")
    cls = FAMILY_CONFIGS[family]
    keys = {k: v for k, v in resolved.items() if k != "family"}
    names = {f.name for f in dataclasses.fields(cls)} - {"num_classes", "in_chans"}
    missing, unknown = sorted(names - set(keys)), sorted(set(keys) - names)
    if missing or unknown:
        raise UserError(f"{source}: the {family} model config lacks {missing or 'nothing'} and has unknown keys "
                        f"{unknown or 'none'}; {REGENERATE}")
    try:
        return parse(cls, {**keys, "num_classes": num_classes, "in_chans": in_chans}, f"{source}: config")
    except UserError as err:
        raise UserError(f"{err}; {REGENERATE}") from None


def model_class(family: str):
    """The family's model class (imports the family's module)."""
    spec = FAMILIES[family]
    return getattr(importlib.import_module(spec.module), spec.model)


def build_model(config):
    """The model of a checked family config (models/configs.py)."""
    family = family_of(config)
    model = model_class(family)(config)
    model.family = family
    return model
