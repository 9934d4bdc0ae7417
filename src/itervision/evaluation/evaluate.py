"""Evaluation of a trained run: predictions at every exit on the calib and test splits, top-1 per exit, and
the recursive classifier's traces. Writes predictions.npz and metrics.json through the run record."""
from __future__ import annotations

import time
from pathlib import Path

import torch

from itervision.data.loaders import describe_prepared, eval_batches
from itervision.errors import UserError
from itervision.evaluation.predict import predict_exits, recursive_traces, top1_per_exit
from itervision.models.registry import build_model
from itervision.runs import RunRecord

EVAL_SPLITS = ("calib", "test")


def build_for_dataset(model_json: dict, prepared: Path):
    """The model of a resolved config, checked against the prepared data it will read."""
    desc = describe_prepared(prepared)
    if len(desc["classes"]) != model_json["num_classes"] or desc["channels"] != model_json["in_chans"]:
        raise UserError(f"{prepared} has {len(desc['classes'])} classes and {desc['channels']} channels, the resolved "
                        f"config {model_json['num_classes']} and {model_json['in_chans']}; rerun `dvc repro`")
    return build_model(model_json["config"], model_json["num_classes"], model_json["in_chans"])


def evaluate_run(record: RunRecord, model_json: dict, run_json: dict, prepared: str | Path) -> dict:
    t0 = time.perf_counter()
    prepared = Path(prepared)
    model = build_for_dataset(model_json, prepared)
    model.load_state_dict(record.weights())
    model.to(torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")).eval()
    ev, size = run_json["evaluate"], model_json["config"]["img_size"]
    interpolation = run_json["train"]["interpolation"]
    per_split = {s: predict_exits(model, eval_batches(prepared, s, size, ev["batch_size"], interpolation=interpolation,
                                                      workers=run_json["train"]["workers"]))
                 for s in EVAL_SPLITS}
    metrics = {"model": record.model, "seed": record.seed,
               "splits": {s: {"n": int(len(d["label"])), "top1_per_exit": top1_per_exit(d)}
                          for s, d in per_split.items()}}
    if model_json["config"]["family"] == "recursive":
        metrics["traces"] = recursive_traces(model, eval_batches(prepared, "test", size, ev["batch_size"],
                                                                 interpolation=interpolation), ev["trace_images"])
    record.write_predictions(per_split)
    # wall-clock of this evaluation (build, load, predict, traces, predictions written): with the training
    # log's start-up it is the run's fixed overhead; descriptive, never compared between runs
    metrics["evaluate_seconds"] = time.perf_counter() - t0
    record.write_metrics(metrics)
    return metrics
