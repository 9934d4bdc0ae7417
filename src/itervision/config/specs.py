"""The resolved configuration of a (dataset, model), typed: what stage configure writes to
configs/resolved/DATASET/MODEL/ and what the run and profile stages read back, through the same schemas as
params.yaml (a hand-edited or stale file is checked exactly like params, and named in one line).

    model.json    ModelSpec: model, study, dataset, classes, channels and the family config
    run.json      RunSpec: the train recipe and the evaluation keys (a DVC dependency of the run)
    hardware.json the train group's hardware knobs (run_configs.HARDWARE_KNOBS: loader workers, checkpoint
                  interval): read by the run, not a dependency of it, since they change its speed, not its results
    profile.json  ProfileConfig: FLOP and timing keys
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from itervision.errors import UserError
from itervision.io import read_json_file
from itervision.layout import resolved_dir
from itervision.models.registry import config_from_dict, family_of
from itervision.config.run_configs import HARDWARE_KNOBS, EvaluateConfig, ProfileConfig, TrainConfig
from itervision.schema import as_dict, parse

REGENERATE = "regenerate it with `dvc repro configure`"


@dataclass(frozen=True)
class ModelSpec:
    model: str
    study: str
    dataset: str
    config: object  # the family config dataclass (models/configs.py), num_classes and in_chans included

    @property
    def family(self) -> str:
        return family_of(self.config)

    @property
    def num_classes(self) -> int:
        return self.config.num_classes

    @property
    def in_chans(self) -> int:
        return self.config.in_chans

    def to_json(self) -> dict:
        keys = as_dict(self.config)
        keys.pop("num_classes")
        keys.pop("in_chans")
        return {"model": self.model, "study": self.study, "dataset": self.dataset, "num_classes": self.num_classes,
                "in_chans": self.in_chans, "config": {"family": self.family, **keys}}


@dataclass(frozen=True)
class RunSpec:
    train: TrainConfig
    evaluate: EvaluateConfig
    world: int = 1  # processes (GPUs) the run trains on: params run.gpus / run.placement

    def to_json(self) -> dict:
        """run.json: the recipe without the hardware knobs (hardware.json)."""
        train = {k: v for k, v in as_dict(self.train).items() if k not in HARDWARE_KNOBS}
        return {"train": train, "evaluate": as_dict(self.evaluate), "world": self.world}

    def hardware_json(self) -> dict:
        return {k: getattr(self.train, k) for k in HARDWARE_KNOBS}


def _read(dataset: str, model: str, name: str, required: tuple) -> tuple[dict, str]:
    path = resolved_dir(dataset, model) / name
    return read_json_file(path, REGENERATE, required=required), str(path)


def _checked(cls, mapping, source: str):
    try:
        return parse(cls, mapping, source)
    except UserError as err:
        raise UserError(f"{err}; {REGENERATE}") from None


def model_spec_from_json(data: dict, source: str) -> ModelSpec:
    if not isinstance(data.get("config"), dict):
        raise UserError(f"{source} lacks its model config; {REGENERATE}")
    config = config_from_dict(data["config"], data["num_classes"], data["in_chans"], source)
    return ModelSpec(model=data["model"], study=data["study"], dataset=data["dataset"], config=config)


def read_model_spec(dataset: str, model: str) -> ModelSpec:
    data, source = _read(dataset, model, "model.json", ("model", "study", "dataset", "num_classes", "in_chans",
                                                        "config"))
    spec = model_spec_from_json(data, source)
    if (spec.dataset, spec.model) != (dataset, model):
        raise UserError(f"{source} describes {spec.model} on {spec.dataset}; {REGENERATE}")
    return spec


def run_spec_from_json(data: dict, source: str) -> RunSpec:
    world = data.get("world", 1)
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise UserError(f"{source}: world = {world!r} is not a process count >= 1; {REGENERATE}")
    return RunSpec(train=_checked(TrainConfig, data["train"], f"{source}: train"),
                   evaluate=_checked(EvaluateConfig, data["evaluate"], f"{source}: evaluate"), world=world)


def read_run_spec(dataset: str, model: str) -> RunSpec:
    """run.json, with the hardware knobs of hardware.json where that file exists (their defaults otherwise)."""
    data, source = _read(dataset, model, "run.json", ("train", "evaluate", "world"))
    knobs = resolved_dir(dataset, model) / "hardware.json"
    if knobs.exists() and isinstance(data.get("train"), dict):
        hardware, _ = _read(dataset, model, "hardware.json", ())
        unknown = sorted(set(hardware) - set(HARDWARE_KNOBS))
        if unknown:
            raise UserError(f"{knobs}: '{unknown[0]}' is not a hardware knob ({', '.join(HARDWARE_KNOBS)}); {REGENERATE}")
        data = {**data, "train": {**data["train"], **hardware}}
    return run_spec_from_json(data, source)


def read_profile_spec(dataset: str, model: str) -> ProfileConfig:
    data, source = _read(dataset, model, "profile.json", ())
    return _checked(ProfileConfig, data, source)


def spec_paths(dataset: str, model: str) -> list[Path]:
    return [resolved_dir(dataset, model) / n for n in ("model.json", "run.json", "profile.json")]
