"""Which runs exist: the single place that maps params to runs, prepared data and resolved configs.

Studies (`recursive`, `sparseformer`) list datasets, main models (run with `seeds`) and ablation models (run
with `ablation_seeds`, a prefix of `seeds`, on `ablation_datasets`), so every comparison stays paired. The
aggregate stages read exactly the runs listed here, never a glob, so stale outputs of a shrunk matrix are
never read.
"""
from __future__ import annotations

from itervision.errors import UserError
from itervision.params import STUDIES, Params
from itervision.runs import RunRecord


def study_of(p: Params, model: str) -> str:
    for study in STUDIES:
        s = p.study(study)
        if model in s.main + s.ablations:
            return study
    raise UserError(f"model '{model}' is in no study; add it to recursive.main/ablations or "
                    f"sparseformer.main/ablations")


def is_ablation(p: Params, model: str) -> bool:
    return model in p.study(study_of(p, model)).ablations


def seeds_for(p: Params, model: str) -> list[int]:
    return p.ablation_seeds if is_ablation(p, model) else p.seeds


def model_datasets(p: Params, model: str) -> list[str]:
    s = p.study(study_of(p, model))
    return s.ablation_datasets if model in s.ablations else s.datasets


def study_models(p: Params, study: str) -> list[tuple[str, str]]:
    """Every (dataset, model) of a study."""
    s = p.study(study)
    return [(ds, m) for m in s.main for ds in s.datasets] + [(ds, m) for m in s.ablations for ds in s.ablation_datasets]


def expected_runs(p: Params, study: str) -> list[RunRecord]:
    """Every (dataset, model, seed) the params say exists for a study."""
    return [RunRecord(study, ds, m, seed, is_ablation(p, m)) for ds, m in study_models(p, study)
            for seed in seeds_for(p, m)]


def run_record(p: Params, dataset: str, model: str, seed: int, study: str | None = None) -> RunRecord:
    study = study or study_of(p, model)
    if dataset not in model_datasets(p, model):
        raise UserError(f"model '{model}' does not run on '{dataset}' in params ({study}: "
                        f"{', '.join(model_datasets(p, model))})")
    return RunRecord(study, dataset, model, seed, is_ablation(p, model))


def dataset_shape(p: Params, dataset: str) -> tuple[int, int]:
    """(classes, channels) of a prepared dataset, from params alone (the subset's class list)."""
    from itervision.data.registry import DATASETS
    from itervision.data.sources import read_class_list

    if dataset in p.subset.imagenet:
        return len(read_class_list(p.subset.imagenet[dataset].class_list)), 3
    if dataset not in DATASETS:
        raise UserError(f"unknown dataset '{dataset}'; add it under subset.torchvision or subset.imagenet")
    spec = p.subset.torchvision.get(dataset)
    n = DATASETS[dataset].num_classes if spec is None or spec.classes == "all" else len(spec.classes)
    return n, DATASETS[dataset].channels


def resolved_configs(p: Params) -> dict:
    """{(dataset, model): {"model.json": ..., "run.json": ..., "profile.json": ...}} for every model of both
    studies: what stages run and profile read (written by stage configure into configs/resolved/)."""
    from itervision.params import model_config, train_config
    from itervision.schema import as_dict

    out = {}
    for study in STUDIES:
        for ds, m in study_models(p, study):
            classes, chans = dataset_shape(p, ds)
            out[(ds, m)] = {
                "model.json": {"model": m, "study": study, "dataset": ds, "num_classes": classes, "in_chans": chans,
                               "config": model_config(p, m, ds)},
                "run.json": {"train": train_config(p, ds, study), "evaluate": as_dict(p.evaluate)},
                "profile.json": as_dict(p.profile),
            }
    return out

