"""Where things live and which runs exist: the single place that maps params to paths.

Studies (`recursive`, `sparseformer`) list datasets, main models (run with `seeds`) and ablation models (run
with `ablation_seeds`, a prefix of `seeds`, so every comparison stays paired). The aggregate stages read
exactly the runs listed here, never a glob, so stale outputs of a shrunk matrix are never read.
"""
from __future__ import annotations

from pathlib import Path

from itervision.errors import UserError
from itervision.params import get

STUDIES = ("recursive", "sparseformer")
PREPARED_ROOT = Path("data/prepared")
RUNS_ROOT = Path("runs")
CHECKPOINT_ROOT = Path("checkpoints")


def prepared_dir(dataset: str) -> Path:
    return PREPARED_ROOT / dataset


def run_dir(study: str, dataset: str, model: str, seed: int) -> Path:
    return RUNS_ROOT / study / dataset / model / f"seed{seed}"


def checkpoint_dir(study: str, dataset: str, model: str, seed: int) -> Path:
    return CHECKPOINT_ROOT / study / dataset / model / f"seed{seed}"


def study_of(params: dict, model: str) -> str:
    for study in STUDIES:
        s = params.get(study) or {}
        if model in (s.get("main") or []) + (s.get("ablations") or []):
            return study
    raise UserError(f"model '{model}' is in no study; add it to recursive.main/ablations or sparseformer.main/ablations")


def seeds_for(params: dict, study: str, model: str) -> list[int]:
    seeds = get(params, "seeds", list)
    abl = get(params, "ablation_seeds", list)
    if abl != seeds[: len(abl)]:
        raise UserError("ablation_seeds must be a prefix of seeds (paired runs); e.g. seeds [0,1,2,3,4], "
                        "ablation_seeds [0,1,2]")
    return seeds if model in get(params, f"{study}.main", list) else abl


def expected_runs(params: dict, study: str) -> list[dict]:
    """Every (dataset, model, seed) the params say exists for a study, with its directory."""
    out = []
    s = get(params, study, dict)
    groups = [(s["datasets"], s["main"]), (s.get("ablation_datasets") or s["datasets"], s.get("ablations") or [])]
    for datasets, models in groups:
        for dataset in datasets:
            for model in models:
                for seed in seeds_for(params, study, model):
                    out.append({"dataset": dataset, "model": model, "seed": seed,
                                "dir": run_dir(study, dataset, model, seed)})
    return out
