"""Where things live on disk, relative to the repository root. Nothing else: run stages import this without
the params checks, so editing those does not make DVC retrain."""
from __future__ import annotations

from pathlib import Path

PREPARED_ROOT = Path("data/prepared")
RESOLVED_ROOT = Path("configs/resolved")
RUNS_ROOT = Path("runs")
CHECKPOINT_ROOT = Path("checkpoints")


def prepared_dir(dataset: str) -> Path:
    return PREPARED_ROOT / dataset


def resolved_dir(dataset: str, model: str) -> Path:
    """configs/resolved/DATASET/MODEL/ with model.json, run.json and profile.json (written by stage configure)."""
    return RESOLVED_ROOT / dataset / model


def read_resolved(dataset: str, model: str, name: str) -> dict:
    """One file of configs/resolved/DATASET/MODEL/."""
    from itervision.io import read_json_file

    return read_json_file(resolved_dir(dataset, model) / name, "regenerate it with `dvc repro configure`")
