"""Typed schemas for params.yaml: a dataclass is the schema, its field metadata the allowed range.

    @dataclass(frozen=True)
    class Evaluate:
        batch_size: int = key(1, doc="images per forward pass")

`parse(Evaluate, mapping, "evaluate")` checks the mapping against the dataclass and returns an instance: unknown
keys, missing keys, wrong types and values out of range are one-line `UserError`s naming the key, the value
and what is allowed. Defaults live in the dataclass alone (a field without a default must come from params).
A field with `when=` only applies to some variants (e.g. `topk` only with `attention: dsa`): it is required
where it applies and forced to None where it does not, so a value that cannot matter never reaches a config
(and never makes DVC rerun a stage).

Written here because no library on our list validates plain YAML with one-line errors; it imports nothing
heavier than the standard library, so a typo fails in well under a second.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Callable

from itervision.errors import UserError

REQUIRED = dataclasses.MISSING


def key(lo=None, hi=None, *, default=REQUIRED, choices=None, when: Callable[[dict], bool] | None = None,
        open_lo: bool = False, pattern: Callable[[Any], bool] | None = None, hint: str = "", doc: str = ""):
    """A dataclass field with its allowed range: lo <= value <= hi (lo < value with open_lo), or one of
    `choices`; `pattern(value)` for strings; `when(values)` says whether the field applies."""
    meta = {"lo": lo, "hi": hi, "choices": choices, "when": when, "open_lo": open_lo, "pattern": pattern,
            "hint": hint, "doc": doc}
    if default is REQUIRED:
        return dataclasses.field(metadata=meta)
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        item = typing.get_args(tp)[0]
        plural = {int: "integers", float: "numbers", str: "strings"}.get(item)
        return f"a list of {plural or _type_name(item)}"
    if origin is dict:
        return "a mapping"
    return {type(None): "null", int: "an integer", float: "a number", bool: "true/false", str: "a string"}.get(
        tp, getattr(tp, "__name__", str(tp)))


def _convert(value, tp, where: str):
    """value as type tp, or raise TypeError. ints are accepted for floats; bools are never numbers."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return _convert(value, arg, where)
            except TypeError:
                continue
        raise TypeError
    if tp is typing.Any:
        return value
    if tp is type(None):
        if value is None:
            return None
        raise TypeError
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise TypeError
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise TypeError
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        raise TypeError
    if tp is str:
        if isinstance(value, str):
            return value
        raise TypeError
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise TypeError
        item = typing.get_args(tp)[0]
        out = [_convert(v, item, where) for v in value]
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if not isinstance(value, dict):
            raise TypeError
        _, val_tp = typing.get_args(tp)
        return {k: _convert(v, val_tp, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise TypeError
        return parse(tp, value, where)
    raise TypeError


def _range_text(meta) -> str:
    if meta["choices"] is not None:
        return "one of " + ", ".join(repr(c) for c in meta["choices"])
    lo, hi = meta["lo"], meta["hi"]
    op = ">" if meta["open_lo"] else ">="
    if lo is not None and hi is not None:
        return f"in {'(' if meta['open_lo'] else '['}{lo}, {hi}]"
    if lo is not None:
        return f"{op} {lo}"
    if hi is not None:
        return f"<= {hi}"
    return meta["hint"] or "valid"


def _range_problem(value, meta) -> str | None:
    """None when the value is allowed, else what is allowed."""
    items = value if isinstance(value, (list, tuple)) else [value]
    for v in items:
        if v is None:
            continue
        if meta["choices"] is not None and v not in meta["choices"]:
            return _range_text(meta)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if meta["lo"] is not None and (v <= meta["lo"] if meta["open_lo"] else v < meta["lo"]):
                return _range_text(meta)
            if meta["hi"] is not None and v > meta["hi"]:
                return _range_text(meta)
    if meta["pattern"] is not None and value is not None and not meta["pattern"](value):
        return meta["hint"] or "valid"
    return None


def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _yaml_hint(value) -> str:
    """YAML 1.1 reads 4e-3 (no dot) as text: say so when a string is a number in disguise."""
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return ""
        if "e" not in value.lower():
            return " (quoted)"
        mantissa, exponent = value.lower().split("e", 1)
        mantissa = mantissa if "." in mantissa else mantissa + ".0"
        return f" (YAML reads {value} as text: write {mantissa}e{exponent})"
    return ""


def parse(cls, mapping, where: str, *, partial: bool = False, extra_ok: tuple = (), add_to: str = "params.yaml"):
    """Check `mapping` against dataclass `cls` and return an instance (or, with partial=True, a dict of the
    keys given, checked the same way: for overlays such as `by_dataset` entries). `add_to` says where a
    missing key belongs."""
    if not isinstance(mapping, dict):
        raise UserError(f"params '{where}' must be a mapping of keys, got {_type_name(type(mapping))} "
                        f"{_short(mapping)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(mapping) - set(fields) - set(extra_ok))
    if unknown:
        raise UserError(f"unknown key '{where}.{unknown[0]}'"
                        + (f" (and {', '.join(unknown[1:])})" if len(unknown) > 1 else "")
                        + f"; valid keys: {', '.join(sorted(fields))}")
    hints = _hints(cls)
    values = {}
    for name, f in fields.items():
        if name not in mapping:
            continue
        dotted = f"{where}.{name}"
        try:
            value = _convert(mapping[name], hints[name], dotted)
        except TypeError:
            raise UserError(f"params key '{dotted}' must be {_type_name(hints[name])}, got "
                            f"{_short(mapping[name])}{_yaml_hint(mapping[name])}") from None
        problem = _range_problem(value, f.metadata)
        if problem:
            raise UserError(f"params key '{dotted}' = {_short(mapping[name])} is out of range: must be {problem}")
        values[name] = value
    if partial:
        return values
    for name, f in fields.items():
        when = f.metadata.get("when")
        applies = when is None or when({**_defaults(cls), **values})
        if not applies:
            values[name] = None
            continue
        missing = name not in values and f.default is REQUIRED and f.default_factory is REQUIRED
        if missing or (when is not None and values.get(name, f.default) is None):
            why = f" ({f.metadata['hint']})" if when is not None and f.metadata.get("hint") else ""
            raise UserError(f"params key '{where}.{name}' is {'missing' if missing else 'null'}{why}; "
                            f"{'add it to' if missing else 'set it in'} {add_to}")
    try:
        obj = cls(**values)
    except TypeError as err:  # a required field that did not apply but has no None default
        raise UserError(f"params '{where}': {err}") from None
    check = getattr(obj, "check", None)
    if check is not None:
        try:
            check()
        except ValueError as err:
            raise UserError(f"params '{where}': {err}") from None
    return obj


def _defaults(cls) -> dict:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not REQUIRED:
            out[f.name] = f.default
    return out


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def as_dict(obj) -> dict:
    """A parsed dataclass as plain data (tuples as lists), for JSON files and fingerprints."""
    def plain(v):
        if dataclasses.is_dataclass(v):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v
    return plain(obj)
