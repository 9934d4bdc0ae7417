"""params.yaml: one typed schema per group, checked once at load time, before any data is read.

`load_params()` returns a `Params` whose groups are frozen dataclasses. Every problem is one line naming the
key, the value and what is allowed: unknown keys, repeated keys, wrong types, values out of range, names that
cannot be folder names, duplicate or out-of-range seeds, an ablation seed list that is not a prefix of `seeds`,
a study naming a model that does not exist. Model configurations are resolved and checked for every dataset
they run on, so a bad architecture key fails here too, not after other runs have trained. Stage configure
runs this check and depends on the whole of params.yaml, so it fails before any run stage whatever changed.

A model is `architectures[models.NAME.arch]`, its `by_dataset.<dataset>` entry, then the model's own keys
(one level). The result keeps only the keys its family reads (see models/configs.py). The study groups are the
studies' own schemas (studies/); `train`, `evaluate` and `profile` are the run's (run_configs.py).
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from itervision.data.registry import DATASETS
from itervision.errors import UserError
from itervision.io import load_yaml
from itervision.models.configs import FAMILY_CONFIGS
from itervision.names import NAME_RULE, is_name
from itervision.config.run_configs import EvaluateConfig, ProfileConfig, TrainConfig
from itervision.runs import MAX_SEED  # the one seed bound, beside the run records
from itervision.schema import as_dict, key, parse
from itervision.studies import STUDIES

DEFAULT_PARAMS = "params.yaml"
MAX_SEEDS = 64              # per list: each seed is a DVC stage per model, and DVC slows with the stage count
MAX_RUNS = 2000             # training runs of one params file (the paper campaign has 185)


def _all_or_count(v) -> bool:
    return v == "all" or (isinstance(v, int) and not isinstance(v, bool) and v >= 0)


def _names(value) -> bool:
    items = value if isinstance(value, (list, tuple)) else list(value) if isinstance(value, dict) else [value]
    return all(is_name(v) for v in items)


# ---------------------------------------------------------------------------------------------- groups

@dataclass(frozen=True, kw_only=True)
class DataParams:
    sources: dict[str, str] = key(pattern=lambda s: len(s) > 0 and _names(s),
                                  hint=f"a non-empty mapping of dataset names ({NAME_RULE}) to folders",
                                  doc="the prepared datasets and the folder each is read from (a DVC dependency)")


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
    seed: int = key(0, 2 ** 32 - 1)
    max_bad_fraction: float = key(0, 1)
    workers: int = key(1)
    verify_checksums: bool = key(default=True, doc="CIFAR/MNIST/Fashion-MNIST files must match the published "
                                                   "checksums (false: synthetic stand-ins)")
    images_per_shard: int = key(1, default=1024, doc="ImageNet subsets: images per tar shard")
    torchvision: dict[str, TorchvisionSubset] = key(default={})
    imagenet: dict[str, ImagenetSubset] = key(default={}, pattern=_names, hint=f"dataset names ({NAME_RULE})")

    def check(self):
        for name in self.torchvision:
            if DATASETS.get(name) is None or DATASETS[name].source != "torchvision":
                raise ValueError(f"subset.torchvision.{name} is not a torchvision dataset; known: "
                                 + ", ".join(n for n, f in DATASETS.items() if f.source == "torchvision"))


def _placement_keys(mapping) -> bool:
    return all(isinstance(k, str) and k.count("/") == 1 and all(is_name(x) for x in k.split("/")) for k in mapping)


@dataclass(frozen=True, kw_only=True)
class RunParams:
    """How a run is launched and on how many processes (GPUs). The number of processes is part of a run's recipe:
    BatchNorm statistics (the recursive encoder) and the ranks' augmentation streams depend on it, so it is in
    every run's resolved run.json and fingerprint, and a change of placement retrains exactly the runs it moves."""
    launcher: str = key(hint="python (a run of several processes starts its own torchrun group), or a torchrun "
                             "command with --nnodes for runs across nodes (docs/campaign.md)")
    gpus: int = key(1, default=1, doc="processes (GPUs) of a run that placement does not name")
    placement: dict[str, int] = key(default={}, pattern=_placement_keys,
                                    hint="DATASET/MODEL: processes, e.g. {cifar10/sa-mlp: 1} (make paper-plan "
                                         "PLACE=1 writes it)")

    def check(self):
        bad = [k for k, v in self.placement.items() if v < 1]
        if bad:
            raise ValueError(f"run.placement.{bad[0]} = {self.placement[bad[0]]}: a run takes at least 1 process")

    def world(self, dataset: str, model: str) -> int:
        return self.placement.get(f"{dataset}/{model}", self.gpus)


@dataclass(frozen=True, kw_only=True)
class TrainParams(TrainConfig):
    """The train group: the recipe, and `by_dataset` entries that override keys per dataset."""
    by_dataset: dict[str, dict[str, Any]] = key(default={})


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
    studies: dict            # study name -> its params group (a StudyParams subclass)
    run: RunParams
    train: TrainParams
    evaluate: EvaluateConfig
    profile: ProfileConfig
    report: ReportParams
    raw: dict = dataclasses.field(repr=False)
    settle_claims: dict = dataclasses.field(default_factory=dict)   # test id -> its sequential design and looks
    settle_runs: dict = dataclasses.field(default_factory=dict)     # (dataset, model) -> the extra seeds, sorted

    def study(self, name: str):
        return self.studies[name]

    def base_seeds(self, study: str, model: str) -> list[int]:
        """The one seeds rule: a main model runs with `seeds`, an ablation with `ablation_seeds` (a prefix of
        `seeds`, so comparisons stay paired); make settle's extra seeds come on top (config/matrix.py)."""
        return list(self.seeds if model in self.study(study).main else self.ablation_seeds)

    def model_datasets(self, study: str, model: str) -> list[str]:
        """The datasets a model of `study` runs on: `datasets` (main) or `ablation_datasets`."""
        s = self.study(study)
        return list(s.datasets if model in s.main else s.ablation_datasets)

    def study_models(self, study: str) -> list[tuple[str, str]]:
        """Every (dataset, model) of a study, main models first."""
        s = self.study(study)
        return [(ds, m) for m in s.main + s.ablations for ds in self.model_datasets(study, m)]

    @property
    def datasets(self) -> list[str]:
        """The prepared datasets (data.sources, in order): one make_subset stage each."""
        return list(self.data.sources)


GROUPS = {"data": DataParams, "subset": SubsetParams, "run": RunParams, "train": TrainParams,
          "evaluate": EvaluateConfig, "profile": ProfileConfig, "report": ReportParams}
TOP_LEVEL = set(GROUPS) | set(STUDIES) | {"scale", "seeds", "ablation_seeds", "architectures", "models"}
OPTIONAL = {"settle"}  # make settle (pipeline/settle.py) writes it; absent or empty: no extra seeds


def read_yaml_mapping(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise UserError(f"params file {path} not found; run from the repository root or pass --params PATH")
    if path.is_dir():
        raise UserError(f"params file {path} is a folder; pass a YAML file")
    size = path.stat().st_size
    if size > MAX_PARAMS_BYTES:
        raise UserError(f"params file {path} is {size / 1e6:.1f} MB; a params file is a few KB (at most "
                        f"{MAX_PARAMS_BYTES // 1000} KB): restore it from git")
    text = path.read_text()
    _refuse_aliases(text, path)
    data = load_yaml(text, f"params file {path}")
    if not isinstance(data, dict):
        raise UserError(f"params file {path} must be a mapping of groups, got {type(data).__name__}")
    return data


MAX_PARAMS_BYTES = 1_000_000  # the paper scale's params.yaml is about 8 KB


def _refuse_aliases(text: str, path: Path) -> None:
    """YAML aliases can expand exponentially (an alias bomb: 90 s and 5.8 GB before DVC gave up); params need none.
    The events are scanned without building anything, so the check itself costs nothing."""
    import yaml

    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                line = event.start_mark.line + 1
                raise UserError(f"params file {path} uses a YAML alias at line {line}; write the values out (params "
                                f"need no anchors or aliases)")
    except yaml.YAMLError:
        return  # load_yaml names the syntax error with its line


def load_params(path: str | Path = DEFAULT_PARAMS) -> Params:
    return check_params(read_yaml_mapping(path))


def _seed_list(raw, name: str) -> list:
    if not isinstance(raw, list) or not raw:
        raise UserError(f"params key '{name}' must be a non-empty list of integers, got {raw!r}"[:300])
    if len(raw) > MAX_SEEDS:
        raise UserError(f"params key '{name}' lists {len(raw)} seeds; at most {MAX_SEEDS} (every seed adds a DVC "
                        f"stage per model); run a larger study in several campaigns")
    for s in raw:
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= MAX_SEED:
            raise UserError(f"params key '{name}' holds {s!r}; seeds are integers in [0, {MAX_SEED}]")
    dup = sorted({s for s in raw if raw.count(s) > 1})
    if dup:
        raise UserError(f"params key '{name}' repeats seed {dup[0]}; each seed once (a repeat would count one run "
                        f"twice)")
    return list(raw)


def check_params(raw: dict) -> Params:
    """Every group, every model on every dataset it runs on, and the rules across groups."""
    unknown = sorted(set(raw) - TOP_LEVEL - OPTIONAL)
    if unknown:
        raise UserError(f"unknown params group '{unknown[0]}'; valid groups: {', '.join(sorted(TOP_LEVEL | OPTIONAL))}")
    for name in sorted(TOP_LEVEL - {"scale"}):
        if name not in raw:
            raise UserError(f"params group '{name}' is missing; add it to params.yaml")
    groups = {name: parse(cls, raw[name], name) for name, cls in GROUPS.items()}
    studies = {name: parse(s.schema, raw[name], name) for name, s in STUDIES.items()}
    seeds = _seed_list(raw["seeds"], "seeds")
    abl = _seed_list(raw["ablation_seeds"], "ablation_seeds")
    if abl != seeds[: len(abl)]:
        raise UserError(f"ablation_seeds {abl} must be a prefix of seeds {seeds} (paired runs); e.g. seeds "
                        f"[0, 1, 2, 3, 4], ablation_seeds [0, 1, 2]")
    scale = raw.get("scale", "custom")
    if not isinstance(scale, str):
        raise UserError(f"params key 'scale' must be a string, got {scale!r}")
    p = Params(scale=scale, seeds=seeds, ablation_seeds=abl, studies=studies, raw=raw, **groups)
    _check_datasets(p)
    _check_models(p)
    _check_placement(p)
    claims, runs = _settle(p, raw.get("settle"))
    return dataclasses.replace(p, settle_claims=claims, settle_runs=runs)


def _check_placement(p: Params) -> None:
    """run.placement names (dataset, model) pairs of the pipeline, each on a number of processes that divides its
    global batch (per-process batch = global batch / processes, the recipe's rule)."""
    pairs = {f"{ds}/{m}": (ds, s) for s in p.studies for ds, m in p.study_models(s)}
    for k in p.run.placement:
        if k not in pairs:
            raise UserError(f"run.placement names {k}, which is no (dataset/model) of this pipeline (e.g. "
                            f"{sorted(pairs)[0]}); remove it or write the placement again with make paper-plan PLACE=1")
    for k, (ds, study) in pairs.items():
        train_config(p, ds, study).batching(p.run.world(*k.split("/")))


def family_code(p: Params, model: str, dataset: str) -> str:
    """The repository path of the module that defines a model's family (a settle run's code dependency)."""
    from itervision.models.configs import FAMILIES

    module = FAMILIES[model_config(p, model, dataset)["family"]].module
    return "src/" + module.replace(".", "/") + ".py"


def _settle(p: Params, raw) -> tuple[dict, dict]:
    """The settle group: {"claims": {test id: design}, "runs": {stage key: {study, dataset, model, seed}}}. Every
    extra run names a model of its study, a dataset it runs on, and a seed it does not already have."""
    if raw is None:
        return {}, {}
    fix = "restore it with `git checkout params.yaml` or write it again with make settle"
    if not isinstance(raw, dict) or set(raw) - {"claims", "runs"}:
        raise UserError(f"params group 'settle' must be a mapping with keys claims and runs; {fix}")
    claims, entries = raw.get("claims") or {}, raw.get("runs") or {}
    if not isinstance(claims, dict) or not isinstance(entries, dict):
        raise UserError(f"params settle.claims and settle.runs must be mappings; {fix}")
    runs: dict = {}
    for key, r in entries.items():
        if not isinstance(r, dict) or set(r) != {"study", "dataset", "model", "seed", "code"}:
            raise UserError(f"params settle.runs.{key} must be {{study, dataset, model, seed, code}}; {fix}")
        study, m, ds, seed = r["study"], r["model"], r["dataset"], r["seed"]
        if study not in p.studies:
            raise UserError(f"params settle.runs.{key} names study '{study}'; studies: {', '.join(p.studies)}")
        s = p.study(study)
        if m not in s.main + s.ablations or ds not in p.model_datasets(study, m):
            raise UserError(f"params settle.runs.{key}: model '{m}' does not run on '{ds}' in {study}")
        if r["code"] != family_code(p, m, ds):
            raise UserError(f"params settle.runs.{key}: code must be {family_code(p, m, ds)} (the module of {m}'s "
                            f"family: the run stage's dependency); {fix}")
        base = p.base_seeds(study, m)
        _seed_list([seed], f"settle.runs.{key}.seed")
        if seed in base or seed in runs.get((ds, m), []):
            raise UserError(f"params settle.runs.{key}: seed {seed} of {m} on {ds} already runs; {fix}")
        runs.setdefault((ds, m), []).append(seed)
    return claims, {k: sorted(v) for k, v in runs.items()}


# Folders a data source must never resolve to: DVC would hash the whole tree (a symlink to / failed deep inside
# DVC naming a broken link under /etc)
SYSTEM_ROOTS = ("/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/opt", "/proc", "/root", "/run", "/srv",
                "/sys", "/tmp", "/usr", "/usr/share", "/var")


def _check_datasets(p: Params) -> None:
    for ds in p.datasets:
        if ds not in p.subset.torchvision and ds not in p.subset.imagenet:
            raise UserError(f"data.sources names '{ds}' without an entry under subset.torchvision or subset.imagenet; "
                            f"add one (how to subset it)")
        source = Path(str(p.data.sources[ds])).expanduser()
        if str(source.resolve()) in SYSTEM_ROOTS:
            raise UserError(f"data.sources.{ds} is {source}, which resolves to {source.resolve()} (a symlink?): DVC "
                            f"would hash that whole tree; point it at the folder that holds the dataset's files")


MAX_EPOCHS = 1000          # the paper recipe trains 200; beyond 1,000 is a typo, not a study
MAX_STEPS_PER_EPOCH = 1_000_000
MAX_GLOBAL_BATCH = 65_536  # 64 x the paper's 1,024


CPU_SCALES = ("cpu", "tiny", "paper-smoke")   # scales whose runs train on this machine's CPU


def _check_budget(train: TrainConfig, where: str, cpu_runs: bool = True) -> None:
    """Bounds on what a typo in `-S` could make cost (epochs 10^8 trained for minutes before anyone noticed), and,
    for a scale whose runs train on this CPU (cpu_runs), a warning for more threads than this machine has cores
    (every CPU run then runs several times slower; a GPU scale's threads are another machine's)."""
    import os
    import sys

    for value, bound, key, why in ((train.epochs, MAX_EPOCHS, "epochs", "the paper recipe trains 200"),
                                   (train.steps_per_epoch or 0, MAX_STEPS_PER_EPOCH, "steps_per_epoch",
                                    "a cap of steps per epoch"),
                                   (train.global_batch, MAX_GLOBAL_BATCH, "global_batch", "64 x the paper's 1,024")):
        if value > bound:
            raise UserError(f"train.{key} {value} ({where}) exceeds {bound:,} ({why}); a typo? set a value up to "
                            f"{bound:,}")
    cores = os.cpu_count() or 1
    if cpu_runs and train.threads > cores:
        print(f"warning: train.threads {train.threads} ({where}) exceeds this machine's {cores} cores: CPU runs "
              f"oversubscribe them (about 10x slower measured with 512 on 2 cores); fine only for another machine",
              file=sys.stderr)


def _check_every_model_entry(p: Params, models: dict, archs: dict) -> None:
    """Every entry of `models`, listed by a study or not, names an architecture and resolves: `dvc exp run -S
    '+models.dsa-mo.topk=2'` (a typo) would otherwise add an entry nothing reads and change nothing."""
    import difflib

    for m, entry in models.items():
        arch = entry.get("arch") if isinstance(entry, dict) else None
        if arch is None:  # an unknown arch is named by model_config below
            near = difflib.get_close_matches(m, [k for k in models if k != m and isinstance(models[k], dict)
                                                 and models[k].get("arch") in archs], n=1)
            hint = (f"a typo of '{near[0]}'? change it with `-S models.{near[0]}.KEY=VALUE`" if near
                    else f"give it `arch:` ({', '.join(sorted(archs))})")
            raise UserError(f"models.{m} names no architecture (arch: {arch!r}); {hint}")
        if p.datasets:
            model_config(p, m, next(iter(p.datasets)))


def _check_models(p: Params) -> None:
    models = p.raw["models"]
    if not isinstance(models, dict) or not models:
        raise UserError("params group 'models' must be a mapping of model names to their keys")
    bad = [m for m in models if not is_name(m)]
    if bad:
        raise UserError(f"model name {bad[0]!r} under `models` is not a valid name ({NAME_RULE}); rename it")
    archs = p.raw["architectures"]
    if not isinstance(archs, dict) or not archs:
        raise UserError("params group 'architectures' must be a mapping of architecture names to their keys")
    for ds in p.train.by_dataset:
        parse(TrainConfig, p.train.by_dataset[ds], f"train.by_dataset.{ds}", partial=True)
    _check_every_model_entry(p, models, archs)
    seen, runs, budgets = {}, 0, set()
    for study, s in p.studies.items():
        parse(TrainConfig, s.train, f"{study}.train", partial=True)
        if s.ablations and not s.ablation_datasets:
            raise UserError(f"{study}.ablation_datasets is empty while {study}.ablations lists models; name the "
                            f"datasets the ablations run on")
        for ds in s.datasets + s.ablation_datasets:
            if ds not in p.datasets:
                raise UserError(f"{study} uses dataset '{ds}', which data.sources does not prepare; add it there")
        extra = [d for d in s.ablation_datasets if d not in s.datasets]
        if extra:
            raise UserError(f"{study}.ablation_datasets names '{extra[0]}', which is not in {study}.datasets "
                            f"(ablations are compared with main models)")
        dup = sorted({m for m in s.main + s.ablations if (s.main + s.ablations).count(m) > 1})
        if dup:
            raise UserError(f"{study} lists model '{dup[0]}' twice (main and ablations are disjoint)")
        for m in s.main + s.ablations:
            if m in seen and seen[m] != study:
                raise UserError(f"model '{m}' is listed by both {seen[m]} and {study}; give each study its own models")
            seen[m] = study
            datasets = p.model_datasets(study, m)
            for ds in datasets:
                model_config(p, m, ds)
                if (study, ds) not in budgets:
                    budgets.add((study, ds))
                    _check_budget(train_config(p, ds, study), f"{study} on {ds}", cpu_runs=p.scale in CPU_SCALES)
            runs += len(datasets) * len(p.base_seeds(study, m))
        try:
            s.check_models(lambda m, ds: model_config(p, m, ds))
        except ValueError as err:
            raise UserError(f"params '{study}': {err}") from None
    if runs > MAX_RUNS:
        raise UserError(f"params plan {runs} training runs, above {MAX_RUNS} (one DVC stage each; DVC slows with the "
                        f"stage count); fewer seeds, models or datasets per campaign")


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


def train_config(p: Params, dataset: str | None = None, study: str | None = None) -> TrainConfig:
    """The recipe of a study's runs on a dataset: the train group, the study's `train` keys on top, then the
    train group's `by_dataset.<dataset>` entry; checked."""
    base = dict(p.raw["train"])
    by = base.pop("by_dataset", None) or {}
    merged = deep_merge(base, p.study(study).train if study else {})
    merged = _for_dataset({**merged, "by_dataset": by}, dataset, "train")
    merged.pop("by_dataset", None)
    where = "train" + (f" ({study} on {dataset})" if study else f" (on {dataset})" if dataset else "")
    return parse(TrainConfig, merged, where)


def main(argv=None):
    """`python -m itervision.config.params [PATH]`: check a params file, one line either way (make repro runs it first,
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
