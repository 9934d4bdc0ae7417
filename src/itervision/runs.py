"""One module owns a run folder: what a (study, dataset, model, seed) run writes, and how it is read back.

    runs/STUDY/DATASET/MODEL/seedN/
        config.json        the resolved model, train and evaluate configuration, data and code fingerprints
        weights.pt         final weights (the EMA weights when the recipe uses EMA)
        train_log.json     per-epoch loss, images/s, seconds; images seen; the learning curve
        predictions.npz    per split (calib, test), per image and exit: predicted class, top probability; labels
        metrics.json       per split: n and top-1 at every exit; recursive traces (sparsity, experts, roles)
    runs/STUDY/DATASET/MODEL/profile.json   per model (stage profile): parameters, FLOPs and wall-clock per exit

A run writes into a hidden staging folder (`.seedN.tmp`) that replaces `seedN/` in one rename once everything
is written: a run that fails (disk full, Ctrl-C, a bad input) leaves no folder that looks complete. One process
at a time may write a run: `RunRecord.lock()` holds an exclusive lock on `checkpoints/.../seedN.lock`.

Aggregation reads these files through `RunRecord` and `load_profile` only: the run's own record of how it was
trained, never the current params.yaml, and no model code (numpy alone; torch only to write weights).
Every reader turns a missing, truncated or corrupt file into one line naming the file and the `dvc repro`
command that regenerates it.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import warnings
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from itervision.errors import UserError
from itervision.io import commit_dir, exclusive_lock, read_json_file, save_torch, write_json, write_npz
from itervision.layout import checkpoint_dir, model_dir
from itervision.names import profile_stage_name, run_stage_name

MAX_SEED = 2 ** 31 - 1  # numpy's and torch's seeding take any seed below this on every platform
CONFIG, WEIGHTS, TRAIN_LOG, PREDICTIONS, METRICS, PROFILE = (
    "config.json", "weights.pt", "train_log.json", "predictions.npz", "metrics.json", "profile.json")


@dataclass(frozen=True)
class RunRecord:
    study: str
    dataset: str
    model: str
    seed: int
    ablation: bool = False  # which matrix stage produced it (for the `dvc repro` hint)
    staging: bool = False   # read and write the hidden staging folder instead of the run folder

    @property
    def final_dir(self) -> Path:
        return model_dir(self.study, self.dataset, self.model) / f"seed{self.seed}"

    @property
    def dir(self) -> Path:
        final = self.final_dir
        return final.with_name(f".{final.name}.tmp") if self.staging else final

    @property
    def checkpoint_dir(self) -> Path:
        return checkpoint_dir(self.study, self.dataset, self.model, self.seed)

    @property
    def stage(self) -> str:
        return run_stage_name(self.study, self.dataset, self.model, self.seed, self.ablation)

    @property
    def regenerate_hint(self) -> str:
        return f"regenerate it with `dvc repro --force {self.stage}`"

    def path(self, name: str) -> Path:
        return self.dir / name

    # ------------------------------------------------------------------ writing (stage run)
    @contextmanager
    def lock(self):
        """Hold the run's exclusive lock for the block; a second process on the same run fails in one line."""
        path = self.checkpoint_dir.with_name(f"seed{self.seed}.lock")
        with exclusive_lock(path, f"process {os.getpid()}",
                            lambda holder: f"{self.model} seed {self.seed} on {self.dataset} is being trained by "
                                           f"{holder} (lock {path}); wait for it to end or stop it, then rerun"):
            yield

    def start_staging(self, keep: tuple[str, ...] = ()) -> RunRecord:
        """An empty staging folder (a leftover of an interrupted run removed), with copies of the run folder's
        files named in `keep`; returns the record that writes there."""
        staged = dataclasses.replace(self, staging=True)
        if staged.dir.exists():
            shutil.rmtree(staged.dir)
        staged.dir.mkdir(parents=True)
        for name in keep:
            shutil.copy2(self.path(name), staged.path(name))
        return staged

    def discard(self) -> None:
        """Remove a staging folder (a failed or interrupted run's partial outputs)."""
        if self.staging:
            shutil.rmtree(self.dir, ignore_errors=True)

    def commit_staging(self) -> None:
        """Put the staging folder in place of the run folder (one rename; metrics.json must be there)."""
        staged = dataclasses.replace(self, staging=True)
        if not staged.path(METRICS).exists():
            raise RuntimeError(f"{staged.dir} lacks {METRICS}: the run is not complete")
        commit_dir(staged.dir, self.final_dir)

    def write_config(self, config: dict) -> None:
        write_json(self.path(CONFIG), config)

    def write_weights(self, state_dict, fingerprint: str) -> None:
        """The final weights, tagged with the run fingerprint they were trained under (config.json's)."""
        save_torch(self.path(WEIGHTS), {"fingerprint": fingerprint, "model": state_dict})

    def write_train_log(self, log: dict) -> None:
        write_json(self.path(TRAIN_LOG), log)

    def write_predictions(self, per_split: dict) -> None:
        """per_split[split] = {"pred": (N, E) int, "prob": (N, E) float, "label": (N,) int}."""
        arrays = {f"{split}__{k}": v for split, d in per_split.items() for k, v in d.items()}
        write_npz(self.path(PREDICTIONS), arrays, compress=True)

    def write_metrics(self, metrics: dict) -> None:
        write_json(self.path(METRICS), metrics)  # written last: its presence marks a complete run

    # ------------------------------------------------------------------ reading (stages aggregate, evaluate)
    def config(self) -> dict:
        return read_json_file(self.path(CONFIG), self.regenerate_hint, required=("config", "train", "data"))

    def train_log(self) -> dict:
        return read_json_file(self.path(TRAIN_LOG), self.regenerate_hint, required=("epochs", "images_seen", "curve"))

    def metrics(self) -> dict:
        m = read_json_file(self.path(METRICS), self.regenerate_hint, required=("splits",))
        for split in ("calib", "test"):
            top1 = (m["splits"].get(split) or {}).get("top1_per_exit")
            if not isinstance(top1, list) or not top1:
                raise UserError(f"{self.path(METRICS)} lacks splits.{split}.top1_per_exit; {self.regenerate_hint}")
            bad = [v for v in top1 if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1]
            if bad:  # NaN fails the comparison too
                raise UserError(f"{self.dir}: {split} top-1 {bad[0]!r} is not an accuracy in [0, 1]; "
                                f"{self.regenerate_hint}")
        return m

    def predictions(self) -> dict:
        """{split: {"pred", "prob", "label", "correct"}} as numpy arrays."""
        path = self.path(PREDICTIONS)
        if not path.exists():
            raise UserError(f"{path} is missing; {self.regenerate_hint}")
        try:
            with np.load(path) as f:
                out = {}
                for k in f.files:
                    split, name = k.split("__", 1)
                    out.setdefault(split, {})[name] = f[k]
        except (zipfile.BadZipFile, ValueError, KeyError, EOFError, OSError) as err:
            raise UserError(f"{path} is unreadable ({type(err).__name__}); {self.regenerate_hint}") from None
        for split in ("calib", "test"):
            d = out.get(split) or {}
            if not {"pred", "prob", "label"} <= set(d):
                raise UserError(f"{path} lacks the {split} predictions; {self.regenerate_hint}")
            d["correct"] = d["pred"] == d["label"][:, None]
        return out

    def weights(self, fingerprint: str) -> dict:
        """The state dict of weights.pt, refused unless it was trained under `fingerprint` (this run's)."""
        import torch

        path = self.path(WEIGHTS)
        if not path.exists():
            raise UserError(f"weights {path} not found; run the training first (`dvc repro {self.stage}`)")
        try:
            with warnings.catch_warnings():  # torch warns about foreign pickles before it refuses them
                warnings.simplefilter("ignore")
                state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # truncated, foreign or unsafe file: all mean "retrain"
            raise UserError(f"weights {path} are unreadable ({type(err).__name__}); {self.regenerate_hint}") from None
        if not isinstance(state, dict) or not isinstance(state.get("model"), dict) or "fingerprint" not in state:
            raise UserError(f"weights {path} are not a run's tagged weights; {self.regenerate_hint}")
        if state["fingerprint"] != fingerprint:
            raise UserError(f"weights {path} were trained for another run (fingerprint {state['fingerprint']}, this "
                            f"run's {fingerprint}); {self.regenerate_hint}")
        return state["model"]


def profile_path(study: str, dataset: str, model: str) -> Path:
    return model_dir(study, dataset, model) / PROFILE


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
