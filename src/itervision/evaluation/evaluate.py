"""Evaluation of a trained run: predictions at every exit on the calib and test splits, top-1 per exit, and
the recursive classifier's traces. Writes predictions.npz and metrics.json (last) through the run record."""
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


def build_for_dataset(spec, prepared: Path):
    """The model of a resolved spec (specs.ModelSpec), checked against the prepared data it will read."""
    desc = describe_prepared(prepared)
    if len(desc["classes"]) != spec.num_classes or desc["channels"] != spec.in_chans:
        raise UserError(f"{prepared} has {len(desc['classes'])} classes and {desc['channels']} channels, the resolved "
                        f"config {spec.num_classes} and {spec.in_chans}; rerun `dvc repro`")
    return build_model(spec.config)


def evaluate_run(record: RunRecord, spec, run, prepared: str | Path, fingerprint: str) -> dict:
    """spec: specs.ModelSpec, run: specs.RunSpec; the weights are read from and the outputs written to `record`'s
    folder, and must have been trained under `fingerprint` (the run's: foreign weights are refused)."""
    t0 = time.perf_counter()
    prepared = Path(prepared)
    model = build_for_dataset(spec, prepared)
    try:
        model.load_state_dict(record.weights(fingerprint))
    except RuntimeError as err:  # shapes or keys of another model
        raise UserError(f"weights in {record.dir} do not fit {spec.model} ({str(err).splitlines()[0]}); "
                        f"{record.regenerate_hint}") from None
    model.to(torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")).eval()
    size, ev, interpolation = spec.config.img_size, run.evaluate, run.train.interpolation
    per_split = {s: predict_exits(model, eval_batches(prepared, s, size, ev.batch_size, interpolation=interpolation,
                                                      workers=run.train.workers))
                 for s in EVAL_SPLITS}
    metrics = {"model": record.model, "seed": record.seed,
               "splits": {s: {"n": int(len(d["label"])), "top1_per_exit": top1_per_exit(d)}
                          for s, d in per_split.items()}}
    if spec.family == "recursive":
        metrics["traces"] = recursive_traces(model, eval_batches(prepared, "test", size, ev.batch_size,
                                                                 interpolation=interpolation), ev.trace_images)
    record.write_predictions(per_split)
    # wall-clock of this evaluation (build, load, predict, traces, predictions written): with the training
    # log's start-up it is the run's fixed overhead; descriptive, never compared between runs
    metrics["evaluate_seconds"] = time.perf_counter() - t0
    record.write_metrics(metrics)
    return metrics
