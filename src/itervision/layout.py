"""Where things live on disk, relative to the repository root. Nothing else: run stages import this without
the params checks, so editing those does not make DVC retrain. Every path built from a name checks the name
(names.py), so no model or dataset name can point outside these folders."""
from __future__ import annotations

from pathlib import Path

from itervision.names import check_name

PREPARED_ROOT = Path("data/prepared")
RESOLVED_ROOT = Path("configs/resolved")
RUNS_ROOT = Path("runs")
CHECKPOINT_ROOT = Path("checkpoints")
METRICS_ROOT = Path("metrics")
PLOTS_ROOT = Path("plots")
REFERENCE_ROOT = Path("data/reference")


def prepared_dir(dataset: str) -> Path:
    return PREPARED_ROOT / check_name(dataset, "dataset")


def resolved_dir(dataset: str, model: str) -> Path:
    """configs/resolved/DATASET/MODEL/ with model.json, run.json and profile.json (written by stage configure)."""
    return RESOLVED_ROOT / check_name(dataset, "dataset") / check_name(model, "model")


def model_dir(study: str, dataset: str, model: str) -> Path:
    """runs/STUDY/DATASET/MODEL/: the model's profile.json and one folder per seed."""
    return RUNS_ROOT / check_name(study, "study") / check_name(dataset, "dataset") / check_name(model, "model")


def checkpoint_dir(study: str, dataset: str, model: str, seed: int) -> Path:
    return (CHECKPOINT_ROOT / check_name(study, "study") / check_name(dataset, "dataset")
            / check_name(model, "model") / f"seed{int(seed)}")


def study_metrics(study: str) -> dict[str, Path]:
    """The files and folders a study's aggregate and report stages write."""
    study = check_name(study, "study")
    return {"aggregate": METRICS_ROOT / study / "aggregate.json", "summary": METRICS_ROOT / f"{study}.json",
            "timing": METRICS_ROOT / f"{study}_timing.json", "tables": METRICS_ROOT / study / "tables",
            "plots": PLOTS_ROOT / study}


LEDGER = {"md": METRICS_ROOT / "claims.md", "csv": METRICS_ROOT / "claims.csv", "counts": METRICS_ROOT / "claims.json",
          "ledger": METRICS_ROOT / "ledger.json", "paper_costs": METRICS_ROOT / "paper_costs.json",
          "forest": PLOTS_ROOT / "forest.png"}


FITTED_CSV = REFERENCE_ROOT / "fitted.csv"   # configuration choices made to match a published figure


def reference_csv(study: str) -> Path:
    """data/reference/STUDY.csv: the published numbers of the study's document."""
    return REFERENCE_ROOT / f"{check_name(study, 'study')}.csv"
