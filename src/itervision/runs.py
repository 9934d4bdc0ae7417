"""One module owns a run folder: what a (study, dataset, model, seed) run writes, and how it is read back.

    runs/STUDY/DATASET/MODEL/seedN/
        config.json        the resolved model, train and evaluate configuration, data and code fingerprints
        weights.pt         final weights (the EMA weights when the recipe uses EMA)
        train_log.json     per-epoch loss, images/s, seconds; images seen; the learning curve
        predictions.npz    per split (calib, test), per image and exit: predicted class, top probability; labels
        metrics.json       per split: n and top-1 at every exit; recursive traces (sparsity, experts, roles)
    runs/STUDY/DATASET/MODEL/profile.json   per model (stage profile): parameters, FLOPs and wall-clock per exit

Aggregation reads these files through `RunRecord` and `load_profile` only: the run's own record of how it was
trained, never the current params.yaml, and no model code (numpy alone; torch only to write weights).
Every reader turns a missing, truncated or corrupt file into one line naming the file and the `dvc repro`
command that regenerates it.
"""
from __future__ import annotations

import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from itervision.errors import UserError
from itervision.io import atomic_path, read_json_file, write_json
from itervision.layout import CHECKPOINT_ROOT, RUNS_ROOT
CONFIG, WEIGHTS, TRAIN_LOG, PREDICTIONS, METRICS, PROFILE = (
    "config.json", "weights.pt", "train_log.json", "predictions.npz", "metrics.json", "profile.json")


def _pipeline(study: str, ablation: bool) -> str:
    return f"pipelines/{study}{'-ablations' if ablation else ''}/dvc.yaml"


def run_stage_name(study: str, dataset: str, model: str, seed: int, ablation: bool) -> str:
    """The DVC stage that produces a run, as `dvc repro` takes it."""
    return f"{_pipeline(study, ablation)}:run_{study}{'_ablation' if ablation else ''}@{dataset}-{model}-{seed}"


def profile_stage_name(study: str, dataset: str, model: str, ablation: bool) -> str:
    return f"{_pipeline(study, ablation)}:profile_{study}{'_ablation' if ablation else ''}@{dataset}-{model}"


@dataclass(frozen=True)
class RunRecord:
    study: str
    dataset: str
    model: str
    seed: int
    ablation: bool = False  # which matrix stage produced it (for the `dvc repro` hint)

    @property
    def dir(self) -> Path:
        return RUNS_ROOT / self.study / self.dataset / self.model / f"seed{self.seed}"

    @property
    def checkpoint_dir(self) -> Path:
        return CHECKPOINT_ROOT / self.study / self.dataset / self.model / f"seed{self.seed}"

    @property
    def stage(self) -> str:
        return run_stage_name(self.study, self.dataset, self.model, self.seed, self.ablation)

    @property
    def fix(self) -> str:
        return f"regenerate it with `dvc repro --force {self.stage}`"

    def path(self, name: str) -> Path:
        return self.dir / name

    # ------------------------------------------------------------------ writing (stage run)
    def write_config(self, config: dict) -> None:
        write_json(self.path(CONFIG), config)

    def write_weights(self, state_dict) -> None:
        import torch

        with atomic_path(self.path(WEIGHTS)) as tmp:
            torch.save(state_dict, tmp)

    def write_train_log(self, log: dict) -> None:
        write_json(self.path(TRAIN_LOG), log)

    def write_predictions(self, per_split: dict) -> None:
        """per_split[split] = {"pred": (N, E) int, "prob": (N, E) float, "label": (N,) int}."""
        arrays = {f"{split}__{k}": v for split, d in per_split.items() for k, v in d.items()}
        with atomic_path(self.path(PREDICTIONS)) as tmp:
            with open(tmp, "wb") as f:
                np.savez_compressed(f, **arrays)

    def write_metrics(self, metrics: dict) -> None:
        write_json(self.path(METRICS), metrics)  # written last: its presence marks a complete run

    # ------------------------------------------------------------------ reading (stages aggregate, evaluate)
    def config(self) -> dict:
        return read_json_file(self.path(CONFIG), self.fix, required=("config", "train", "data"))

    def train_log(self) -> dict:
        return read_json_file(self.path(TRAIN_LOG), self.fix, required=("epochs", "images_seen", "curve"))

    def metrics(self) -> dict:
        m = read_json_file(self.path(METRICS), self.fix, required=("splits",))
        for split in ("calib", "test"):
            if "top1_per_exit" not in (m["splits"].get(split) or {}):
                raise UserError(f"{self.path(METRICS)} lacks splits.{split}.top1_per_exit; {self.fix}")
        return m

    def predictions(self) -> dict:
        """{split: {"pred", "prob", "label", "correct"}} as numpy arrays."""
        path = self.path(PREDICTIONS)
        if not path.exists():
            raise UserError(f"{path} is missing; {self.fix}")
        try:
            with np.load(path) as f:
                out = {}
                for k in f.files:
                    split, name = k.split("__", 1)
                    out.setdefault(split, {})[name] = f[k]
        except (zipfile.BadZipFile, ValueError, KeyError, EOFError, OSError) as err:
            raise UserError(f"{path} is unreadable ({type(err).__name__}); {self.fix}") from None
        for split in ("calib", "test"):
            d = out.get(split) or {}
            if not {"pred", "prob", "label"} <= set(d):
                raise UserError(f"{path} lacks the {split} predictions; {self.fix}")
            d["correct"] = d["pred"] == d["label"][:, None]
        return out

    def weights(self) -> dict:
        import torch

        path = self.path(WEIGHTS)
        if not path.exists():
            raise UserError(f"weights {path} not found; run the training first (`dvc repro {self.stage}`)")
        try:
            with warnings.catch_warnings():  # torch warns about foreign pickles before it refuses them
                warnings.simplefilter("ignore")
                state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # truncated, foreign or unsafe file: all mean "retrain"
            raise UserError(f"weights {path} are unreadable ({type(err).__name__}); {self.fix}") from None
        if not isinstance(state, dict):
            raise UserError(f"weights {path} hold a {type(state).__name__}, not a state dict; {self.fix}")
        return state


def profile_path(study: str, dataset: str, model: str) -> Path:
    return RUNS_ROOT / study / dataset / model / PROFILE


def write_profile(study: str, dataset: str, model: str, profile: dict) -> None:
    write_json(profile_path(study, dataset, model), profile)


def load_profile(study: str, dataset: str, model: str, ablation: bool = False) -> dict:
    fix = f"regenerate it with `dvc repro --force {profile_stage_name(study, dataset, model, ablation)}`"
    return read_json_file(profile_path(study, dataset, model), fix, required=("costs", "timing"))


def load_all(records: list[RunRecord], read) -> dict:
    """`read(record)` for every record, naming every broken run at once (not only the first)."""
    out, errors = {}, []
    for r in records:
        try:
            out[r] = read(r)
        except UserError as err:
            errors.append(str(err))
    if errors:
        more = f" (and {len(errors) - 1} more: " + "; ".join(e.split(";")[0] for e in errors[1:]) + ")" \
            if len(errors) > 1 else ""
        raise UserError(errors[0] + more)
    return out
