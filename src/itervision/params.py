"""params.yaml: one typed schema per group, checked once at load time, before any data is read.

`load_params()` returns a `Params` whose groups are frozen dataclasses. Every problem is one line naming the
key, the value and what is allowed: unknown keys, wrong types, values out of range, duplicate seeds, an
ablation seed list that is not a prefix of `seeds`, a study naming a model that does not exist, a target
model that is not a static model. Model configurations are resolved and checked for every dataset they run
on, so a bad architecture key fails here too, not after other runs have trained.

A model is `architectures[models.NAME.arch]`, its `by_dataset.<dataset>` entry, then the model's own keys
(one level). The result keeps only the keys its family reads (see models/configs.py).
"""
from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from itervision.data.registry import DATASETS, ROOT_KEYS
from itervision.errors import UserError
from itervision.models.configs import FAMILY_CONFIGS
from itervision.schema import as_dict, key, parse

DEFAULT_PARAMS = "params.yaml"
STUDIES = ("recursive", "sparseformer")
_RANDAUGMENT = re.compile(r"^rand(-(m\d+|n\d+|mstd\d+(\.\d+)?|mmax\d+|inc[01]|p\d*\.?\d+))*$")


def _randaugment_ok(s: str) -> bool:
    return s == "" or bool(_RANDAUGMENT.match(s))


def _all_or_count(v) -> bool:
    return v == "all" or (isinstance(v, int) and not isinstance(v, bool) and v >= 0)


# ---------------------------------------------------------------------------------------------- groups

@dataclass(frozen=True, kw_only=True)
class DataParams:
    cache_root: str = key(doc="where source files are staged or downloaded")
    download: bool = key(default=False)
    roots: dict[str, str | None] = key(default={}, pattern=lambda r: set(r) <= set(ROOT_KEYS),
                                       hint=f"keys among {', '.join(ROOT_KEYS)}")


@dataclass(frozen=True, kw_only=True)
class TorchvisionSubset:
    classes: str | list[str | int] = key(pattern=lambda c: c == "all" or (isinstance(c, list) and len(c) > 0),
                                         hint="'all' or a non-empty list of class names/indices")
    train_per_class: int | str = key(pattern=_all_or_count, hint="a count >= 0 or 'all'")
    calib_per_class: int = key(0)
    test_per_class: int | str = key(pattern=_all_or_count, hint="a count >= 0 or 'all'")


@dataclass(frozen=True, kw_only=True)
class ImagenetSubset:
    class_list: str = key()
    short_side: int | None = key(8, default=None)
    holdout_per_class: int = key(0)
    calib_per_class: int = key(0, default=0)


@dataclass(frozen=True, kw_only=True)
class SubsetParams:
    seed: int = key(0)
    datasets: list[str] = key(pattern=lambda d: len(set(d)) == len(d) and len(d) > 0, hint="non-empty, no repeats")
    max_bad_fraction: float = key(0, 1)
    workers: int = key(1)
    torchvision: dict[str, TorchvisionSubset] = key(default={})
    imagenet: dict[str, ImagenetSubset] = key(default={})

    def check(self):
        for name in self.torchvision:
            if DATASETS.get(name) is None or DATASETS[name].source != "torchvision":
                raise ValueError(f"subset.torchvision.{name} is not a torchvision dataset; known: "
                                 + ", ".join(n for n, f in DATASETS.items() if f.source == "torchvision"))
        for name in self.datasets:
            if name not in self.torchvision and name not in self.imagenet:
                raise ValueError(f"subset.datasets names '{name}' without an entry under subset.torchvision or "
                                 f"subset.imagenet")


@dataclass(frozen=True, kw_only=True)
class RecursiveStudy:
    datasets: list[str] = key()
    main: list[str] = key(doc="run with every seed")
    ablations: list[str] = key(default=[], doc="run with ablation_seeds on ablation_datasets")
    ablation_datasets: list[str] = key(default=[])
    baseline: str = key(doc="table 1 differences are to this model")
    reference: str = key(doc="the model every ablation is compared with (a main model)")
    k_ablation: list[str] = key(default=[])
    depth_ablation: list[str] = key(default=[])
    embedding_ablation: list[str] = key(default=[])
    train: dict[str, Any] = key(default={}, doc="train keys for this study's runs, on top of the train group")

    def check(self):
        if self.baseline not in self.main:
            raise ValueError(f"recursive.baseline '{self.baseline}' must be one of recursive.main")
        if self.reference not in self.main:
            raise ValueError(f"recursive.reference '{self.reference}' must be one of recursive.main")
        for name in ("k_ablation", "depth_ablation", "embedding_ablation"):
            models = getattr(self, name)
            extra = [m for m in models if m not in self.main + self.ablations]
            if extra:
                raise ValueError(f"recursive.{name} names '{extra[0]}', which is in neither recursive.main nor "
                                 f"recursive.ablations")
            if models and self.reference not in models:
                raise ValueError(f"recursive.{name} must include the reference model '{self.reference}'")


@dataclass(frozen=True, kw_only=True)
class SparseFormerStudy:
    datasets: list[str] = key()
    main: list[str] = key()
    ablations: list[str] = key(default=[])
    ablation_datasets: list[str] = key(default=[])
    static: list[str] = key(doc="static (one-round) models, drawn as points")
    recurrent: str = key()
    no_memory: str = key()
    budget_models: list[str] = key(doc="early exit is compared at the cost of each")
    target_model: str = key(doc="'compute needed to reach this model's accuracy'")
    frontier_points: int = key(2)
    train: dict[str, Any] = key(default={}, doc="train keys for this study's runs, on top of the train group")

    def check(self):
        both = self.main + self.ablations
        if self.recurrent not in self.main:
            raise ValueError(f"sparseformer.recurrent '{self.recurrent}' must be one of sparseformer.main")
        for name, models in (("static", self.static), ("no_memory", [self.no_memory])):
            extra = [m for m in models if m not in both]
            if extra:
                raise ValueError(f"sparseformer.{name} names '{extra[0]}', which is in neither main nor ablations")
        bad = [m for m in self.budget_models if m not in self.static]
        if bad:
            raise ValueError(f"sparseformer.budget_models names '{bad[0]}', which is not in sparseformer.static")
        if self.target_model not in self.static:
            raise ValueError(f"sparseformer.target_model '{self.target_model}' is not in sparseformer.static")


@dataclass(frozen=True, kw_only=True)
class RunParams:
    launcher: str = key(hint="python, or torchrun ... (see README)")


@dataclass(frozen=True, kw_only=True)
class TrainParams:
    """The recipe of stage run (train), shared by every model; `by_dataset` entries override keys per dataset."""
    epochs: int = key(1)
    steps_per_epoch: int | None = key(1, default=None, doc="cap on optimiser steps per epoch (null = the whole "
                                                           "training split)")
    batch_size: int = key(2, doc="per process")
    lr: float = key(0, open_lo=True, doc="peak lr at lr_batch, scaled linearly with the global batch")
    lr_batch: int = key(1)
    min_lr: float = key(0)
    warmup_epochs: float = key(0)
    warmup_lr: float = key(0)
    weight_decay: float = key(0)
    randaugment: str = key(pattern=_randaugment_ok, hint="'' (off) or a timm string such as rand-m9-n2-mstd0.5")
    crop_scale: list[float] = key(0, 1, open_lo=True, pattern=lambda s: len(s) == 2 and s[0] <= s[1],
                                  hint="[low, high] with 0 < low <= high <= 1")
    crop_pad: int = key(0, doc="pad-and-crop translation in pixels (tensor data path)")
    hflip: float = key(0, 1)
    interpolation: str = key(choices=("bilinear", "bicubic"))
    mixup: float = key(0)
    cutmix: float = key(0)
    mix_prob: float = key(0, 1)
    label_smoothing: float = key(0, 1)
    random_erasing: float = key(0, 1)
    repeated_aug: int = key(1)
    clip_grad: float = key(0)
    amp: str = key(choices=("none", "bf16", "fp16"))
    ema: bool = key()
    ema_decay: float = key(0, 1, open_lo=True)
    workers: int = key(0, default=0, doc="loader processes for image folders")
    threads: int = key(0, default=0, doc="torch threads (0 = torch's default)")
    curve_points: int = key(0, doc="learning-curve evaluations during training (the final one is separate)")
    curve_images: int = key(1, doc="images of the calib and of the test split scored at each curve point")
    by_dataset: dict[str, dict[str, Any]] = key(default={})

    def check(self):
        if (self.mixup > 0 or self.cutmix > 0) and self.batch_size % 2:
            raise ValueError(f"train.batch_size {self.batch_size} must be even with mixup/cutmix (pairs images "
                             f"within a batch)")


@dataclass(frozen=True, kw_only=True)
class EvaluateParams:
    """Stage run (prediction at every exit after training)."""
    batch_size: int = key(1)
    trace_images: int = key(1, doc="test images traced for the recursive tables (sparsity, experts, roles)")


@dataclass(frozen=True, kw_only=True)
class ProfileParams:
    """Stage profile (per model, not per seed): FLOPs and wall-clock per exit."""
    timing_batch: int = key(1)
    timing_warmup: int = key(0)
    timing_repeats: int = key(1)
    latency_repeats: int = key(1)


@dataclass(frozen=True, kw_only=True)
class ReportParams:
    regression_min_drop: float = key(0, 1, doc="the gate never flags a drop of mean top-1 smaller than this")


# ---------------------------------------------------------------------------------------------- loading

@dataclass(frozen=True, kw_only=True)
class Params:
    scale: str
    data: DataParams
    subset: SubsetParams
    seeds: list
    ablation_seeds: list
    recursive: RecursiveStudy
    sparseformer: SparseFormerStudy
    run: RunParams
    train: TrainParams
    evaluate: EvaluateParams
    profile: ProfileParams
    report: ReportParams
    raw: dict = dataclasses.field(repr=False)

    def study(self, name: str):
        return getattr(self, name)


GROUPS = {"data": DataParams, "subset": SubsetParams, "recursive": RecursiveStudy,
          "sparseformer": SparseFormerStudy, "run": RunParams, "train": TrainParams, "evaluate": EvaluateParams,
          "profile": ProfileParams, "report": ReportParams}
TOP_LEVEL = set(GROUPS) | {"scale", "seeds", "ablation_seeds", "architectures", "models"}


def read_yaml_mapping(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise UserError(f"params file {path} not found; run from the repository root or pass --params PATH")
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UserError(f"params file {path} is not valid YAML{where}; fix the syntax") from None
    if not isinstance(data, dict):
        raise UserError(f"params file {path} must be a mapping of groups, got {type(data).__name__}")
    return data


def load_params(path: str | Path = DEFAULT_PARAMS) -> Params:
    return check_params(read_yaml_mapping(path))


def _seed_list(raw, name: str) -> list:
    if not isinstance(raw, list) or not raw:
        raise UserError(f"params key '{name}' must be a non-empty list of integers, got {raw!r}")
    for s in raw:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise UserError(f"params key '{name}' holds {s!r}; seeds are integers >= 0")
    dup = sorted({s for s in raw if raw.count(s) > 1})
    if dup:
        raise UserError(f"params key '{name}' repeats seed {dup[0]}; each seed once (a repeat would count one run "
                        f"twice)")
    return list(raw)


def check_params(raw: dict) -> Params:
    """Every group, every model on every dataset it runs on, and the rules across groups."""
    unknown = sorted(set(raw) - TOP_LEVEL)
    if unknown:
        raise UserError(f"unknown params group '{unknown[0]}'; valid groups: {', '.join(sorted(TOP_LEVEL))}")
    for name in sorted(TOP_LEVEL - {"scale"}):
        if name not in raw:
            raise UserError(f"params group '{name}' is missing; add it to params.yaml")
    groups = {name: parse(cls, raw[name], name) for name, cls in GROUPS.items()}
    seeds = _seed_list(raw["seeds"], "seeds")
    abl = _seed_list(raw["ablation_seeds"], "ablation_seeds")
    if abl != seeds[: len(abl)]:
        raise UserError(f"ablation_seeds {abl} must be a prefix of seeds {seeds} (paired runs); e.g. seeds "
                        f"[0, 1, 2, 3, 4], ablation_seeds [0, 1, 2]")
    scale = raw.get("scale", "custom")
    if not isinstance(scale, str):
        raise UserError(f"params key 'scale' must be a string, got {scale!r}")
    p = Params(scale=scale, seeds=seeds, ablation_seeds=abl, raw=raw, **groups)
    _check_models(p)
    return p


def _check_models(p: Params) -> None:
    models = p.raw["models"]
    if not isinstance(models, dict) or not models:
        raise UserError("params group 'models' must be a mapping of model names to their keys")
    archs = p.raw["architectures"]
    if not isinstance(archs, dict) or not archs:
        raise UserError("params group 'architectures' must be a mapping of architecture names to their keys")
    train_datasets = set(p.subset.datasets)
    for ds in p.train.by_dataset:
        parse(TrainParams, p.train.by_dataset[ds], f"train.by_dataset.{ds}", partial=True)
    seen = {}
    for study in STUDIES:
        s = p.study(study)
        parse(TrainParams, s.train, f"{study}.train", partial=True)
        if s.ablations and not s.ablation_datasets:
            raise UserError(f"{study}.ablation_datasets is empty while {study}.ablations lists models; name the "
                            f"datasets the ablations run on")
        for ds in s.datasets + s.ablation_datasets:
            if ds not in train_datasets:
                raise UserError(f"{study} uses dataset '{ds}', which subset.datasets does not prepare; add it there")
        extra = [d for d in s.ablation_datasets if d not in s.datasets]
        if extra:
            raise UserError(f"{study}.ablation_datasets names '{extra[0]}', which is not in {study}.datasets "
                            f"(ablations are compared with main models)")
        for m in s.main + s.ablations:
            if m in seen and seen[m] != study:
                raise UserError(f"model '{m}' is listed by both studies; give each study its own models")
            seen[m] = study
            for ds in (s.datasets if m in s.main else s.ablation_datasets):
                model_config(p, m, ds)
                train_config(p, ds, study)
        dup = sorted({m for m in s.main + s.ablations if (s.main + s.ablations).count(m) > 1})
        if dup:
            raise UserError(f"{study} lists model '{dup[0]}' twice (main and ablations are disjoint)")
    if "sparseformer" in seen.values():
        sf = p.sparseformer
        for m in sf.static:
            if len(model_config(p, m, sf.datasets[0])["rounds"]) != 1:
                raise UserError(f"sparseformer.static names '{m}', which has several rounds")


def deep_merge(base: dict, overlay: dict) -> dict:
    """Recursively merge `overlay` into a copy of `base`; lists and scalars are replaced."""
    out = copy.deepcopy(base)
    for k, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], value)
        else:
            out[k] = copy.deepcopy(value)
    return out


def _for_dataset(group: dict, dataset: str | None, where: str) -> dict:
    group = dict(group)
    by = group.pop("by_dataset", None) or {}
    if not isinstance(by, dict):
        raise UserError(f"params key '{where}.by_dataset' must be a mapping of dataset names")
    entry = by.get(dataset) if dataset else None
    if entry is not None and not isinstance(entry, dict):
        raise UserError(f"params key '{where}.by_dataset.{dataset}' must be a mapping of keys")
    return deep_merge(group, entry or {})


def model_config(p: Params, name: str, dataset: str | None = None) -> dict:
    """The resolved, checked architecture of a model on a dataset: {'family': ..., every key it reads}."""
    models, archs = p.raw["models"], p.raw["architectures"]
    if name not in models:
        raise UserError(f"unknown model '{name}'; known models: {', '.join(sorted(models))}")
    own = models[name]
    if not isinstance(own, dict):
        raise UserError(f"params key 'models.{name}' must be a mapping of keys, got {own!r}")
    own = dict(own)
    arch = own.pop("arch", None)
    if arch not in archs:
        raise UserError(f"model '{name}' names arch {arch!r}; known: {', '.join(sorted(archs))}")
    if not isinstance(archs[arch], dict):
        raise UserError(f"params key 'architectures.{arch}' must be a mapping of keys")
    base = _for_dataset(archs[arch], dataset, f"architectures.{arch}")
    arch_family = base.pop("family", None)
    if arch_family not in FAMILY_CONFIGS:
        raise UserError(f"params key 'architectures.{arch}.family' = {arch_family!r}; use one of "
                        f"{', '.join(FAMILY_CONFIGS)}")
    family = own.pop("family", arch_family)
    if family not in FAMILY_CONFIGS:
        raise UserError(f"params key 'models.{name}.family' = {family!r}; use one of {', '.join(FAMILY_CONFIGS)}")
    cls = FAMILY_CONFIGS[family]
    fields = {f.name for f in dataclasses.fields(cls)} - {"num_classes", "in_chans"}
    where = f"models.{name}" + (f" (on {dataset})" if dataset else "")
    for k in ("num_classes", "in_chans"):
        if k in base or k in own:
            raise UserError(f"params key '{where}.{k}' is set by the dataset, not by params; remove it")
    # the architecture's own keys first, so that a bad value is named where it is written
    parse(FAMILY_CONFIGS[arch_family], base, f"architectures.{arch}", partial=True)
    if family != arch_family:
        # a model of another family built on this architecture (e.g. the encoder-only baseline) reads only
        # the keys its family knows
        base = {k: v for k, v in base.items() if k in fields}
    cfg = parse(cls, {**base, **own}, where, add_to=f"architectures.{arch} or models.{name}")
    out = {"family": family, **as_dict(cfg)}
    out.pop("num_classes")
    out.pop("in_chans")
    return out


def train_config(p: Params, dataset: str | None = None, study: str | None = None) -> dict:
    """The recipe of a study's runs on a dataset: the train group, the study's `train` keys on top, then the
    train group's `by_dataset.<dataset>` entry; checked."""
    base = dict(p.raw["train"])
    by = base.pop("by_dataset", None) or {}
    merged = deep_merge(base, p.study(study).train if study else {})
    merged = _for_dataset({**merged, "by_dataset": by}, dataset, "train")
    where = "train" + (f" ({study} on {dataset})" if study else f" (on {dataset})" if dataset else "")
    cfg = as_dict(parse(TrainParams, merged, where))
    cfg.pop("by_dataset")
    return cfg


def main(argv=None):
    """`python -m itervision.params [PATH]`: check a params file, one line either way (make repro runs it first,
    so a malformed file is named before DVC reads it)."""
    import sys

    from itervision.errors import cli_entry

    @cli_entry
    def check(args):
        path = args[0] if args else DEFAULT_PARAMS
        p = load_params(path)
        print(f"{path}: {p.scale} scale, checked")
    check(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
