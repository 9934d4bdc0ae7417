"""The run matrix: the single place that maps params to runs, prepared data and resolved configs.

Each study (studies/) lists datasets, main models (run with `seeds`) and ablation models (run with
`ablation_seeds`, a prefix of `seeds`, on `ablation_datasets`), so every comparison stays paired. The aggregate
stages read exactly the runs listed here, never a glob, so stale outputs of a shrunk matrix are never read.
"""
from __future__ import annotations

from itervision.errors import UserError
from itervision.config.params import Params, model_config, train_config
from itervision.runs import RunRecord
from itervision.config.specs import ModelSpec, RunSpec


def study_of(p: Params, model: str) -> str:
    for name, s in p.studies.items():
        if model in s.main + s.ablations:
            return name
    raise UserError(f"model '{model}' is in no study; add it to the main or ablations list of one of "
                    f"{', '.join(p.studies)}")


def is_ablation(p: Params, model: str) -> bool:
    return model in p.study(study_of(p, model)).ablations


def seeds_for(p: Params, model: str, dataset: str | None = None) -> list[int]:
    """The model's seeds (Params.base_seeds: `seeds` for a main model, `ablation_seeds` for an ablation), then on
    `dataset` the extra seeds that make settle gave it (params settle.runs; none in the default run)."""
    base = p.base_seeds(study_of(p, model), model)
    return base + p.settle_runs.get((dataset, model), []) if dataset is not None else base


def common_seeds(p: Params, dataset: str, *models: str) -> list[int]:
    """The seeds every one of `models` has on `dataset`, in order: what a paired comparison of them uses."""
    first = seeds_for(p, models[0], dataset)
    return [s for s in first if all(s in seeds_for(p, m, dataset) for m in models[1:])]


def model_datasets(p: Params, model: str) -> list[str]:
    return p.model_datasets(study_of(p, model), model)


def study_models(p: Params, study: str) -> list[tuple[str, str]]:
    """Every (dataset, model) of a study (Params.study_models)."""
    return p.study_models(study)


def expected_runs(p: Params, study: str) -> list[RunRecord]:
    """Every (dataset, model, seed) the params say exists for a study."""
    return [RunRecord(study, ds, m, seed, is_ablation(p, m)) for ds, m in study_models(p, study)
            for seed in seeds_for(p, m, ds)]


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


def model_spec(p: Params, model: str, dataset: str) -> ModelSpec:
    """The resolved, typed model of a (dataset, model): its family config with the dataset's classes and
    channels."""
    from itervision.models.registry import config_from_dict

    classes, chans = dataset_shape(p, dataset)
    config = config_from_dict(model_config(p, model, dataset), classes, chans, f"models.{model} (on {dataset})")
    return ModelSpec(model=model, study=study_of(p, model), dataset=dataset, config=config)


def run_spec(p: Params, model: str, dataset: str) -> RunSpec:
    return RunSpec(train=train_config(p, dataset, study_of(p, model)), evaluate=p.evaluate,
                   world=p.run.world(dataset, model))


def resolved_configs(p: Params) -> dict:
    """{(dataset, model): {"model.json", "run.json", "hardware.json", "profile.json"}} for every model of every
    study: what stages run and profile read (written by stage configure into configs/resolved/)."""
    from itervision.schema import as_dict

    out = {}
    for study in p.studies:
        for ds, m in study_models(p, study):
            run = run_spec(p, m, ds)
            out[(ds, m)] = {"model.json": model_spec(p, m, ds).to_json(), "run.json": run.to_json(),
                            "hardware.json": run.hardware_json(), "profile.json": as_dict(p.profile)}
    return out
