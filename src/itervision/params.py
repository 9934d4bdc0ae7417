"""Reading params.yaml: typed look-ups with one-line errors, model configs as data."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from itervision.errors import UserError

DEFAULT_PARAMS = "params.yaml"


def load_params(path: str | Path = DEFAULT_PARAMS) -> dict:
    path = Path(path)
    if not path.exists():
        raise UserError(f"params file {path} not found; run from the repository root or pass --params PATH")
    try:
        with open(path) as f:
            params = yaml.safe_load(f)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UserError(f"params file {path} is not valid YAML{where}; fix the syntax") from None
    if not isinstance(params, dict):
        raise UserError(f"params file {path} must be a mapping of stage groups, got {type(params).__name__}")
    return params


def get(params: dict, dotted: str, expected: type | tuple | None = None) -> Any:
    """params['a']['b'] for 'a.b', with a one-line error naming the missing or mistyped key."""
    node: Any = params
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise UserError(f"params key '{dotted}' is missing; add it to params.yaml")
        node = node[part]
    if expected is not None and not isinstance(node, expected):
        names = expected.__name__ if isinstance(expected, type) else "/".join(t.__name__ for t in expected)
        raise UserError(f"params key '{dotted}' must be {names}, got {node!r}")
    return node


def deep_merge(base: dict, overlay: dict) -> dict:
    """Recursively merge `overlay` into a copy of `base`; lists and scalars are replaced."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def for_dataset(group: dict, dataset: str | None) -> dict:
    """A params group with its `by_dataset.<dataset>` entry merged on top (and `by_dataset` removed)."""
    group = dict(group or {})
    by = group.pop("by_dataset", None) or {}
    return deep_merge(group, by.get(dataset) or {}) if dataset else group


def model_config(params: dict, name: str, dataset: str | None = None) -> dict:
    """Resolve a named model: `architectures[models.NAME.arch]`, its `by_dataset` entry, then the model's keys.

    One level only, so a DVC stage can declare exactly the keys it reads: `architectures.FAMILY` and
    `models.NAME`.
    """
    models = get(params, "models", dict)
    if name not in models:
        raise UserError(f"unknown model '{name}'; known models: {', '.join(sorted(models))}")
    own = dict(models[name] or {})
    arch = own.pop("arch", None)
    archs = get(params, "architectures", dict)
    if arch not in archs:
        raise UserError(f"model '{name}' names arch {arch!r}; known: {', '.join(sorted(archs))}")
    return deep_merge(for_dataset(archs[arch], dataset), own)


def train_config(params: dict, dataset: str | None = None) -> dict:
    return for_dataset(get(params, "train", dict), dataset)
