"""One pass over the calibration and test splits, storing per image and per exit the predicted class, the top
softmax probability and whether it is correct (`predictions.npz`); then the metrics every later stage reads.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from itervision.data.loaders import build_transform, dataset_description, open_split
from itervision.engine.checkpoint import load_weights
from itervision.evaluation.costs import model_costs
from itervision.evaluation.early_exit import sweep
from itervision.evaluation.timing import time_exits
from itervision.io import atomic_path, write_json
from itervision.models import build_model

EVAL_SPLITS = ("calib", "test")


def model_device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def predict_exits(model, dataset, batch_size: int = 256, workers: int = 0) -> dict:
    model.eval()
    device = model_device(model)
    preds, probs, labels = [], [], []
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=workers)
    for img, target in loader:
        logits = torch.stack(model(img.to(device))["logits"], 1).float()  # B, E, C
        top, pred = logits.softmax(-1).max(-1)
        preds.append(pred.to(torch.int32).cpu())
        probs.append(top.cpu())
        labels.append(target)
    pred, label = torch.cat(preds).numpy(), torch.cat(labels).numpy().astype(np.int64)
    return {"pred": pred, "prob": torch.cat(probs).numpy().astype(np.float32), "label": label,
            "correct": pred == label[:, None]}


@torch.no_grad()
def recursive_traces(model, dataset, images: int = 256) -> dict:
    img = torch.stack([dataset[i][0] for i in range(min(images, len(dataset)))])
    model.eval()
    return model(img.to(model_device(model)), trace=True)["trace"]


def save_predictions(path: Path, per_split: dict) -> None:
    arrays = {f"{split}_{k}": v for split, d in per_split.items() for k, v in d.items()}
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **arrays)


def load_predictions(path: Path) -> dict:
    with np.load(path) as f:
        out = {}
        for key in f.files:
            split, name = key.split("_", 1)
            out.setdefault(split, {})[name] = f[key]
    return out


def evaluate_run(*, model_name: str, model_cfg: dict, eval_cfg: dict, prepared: str | Path, weights: str | Path,
                 out_dir: str | Path, seed: int) -> dict:
    """Evaluate final weights at every exit; write predictions.npz and metrics.json into out_dir."""
    prepared, out_dir = Path(prepared), Path(out_dir)
    desc = dataset_description(prepared)
    torch.manual_seed(seed)
    model = build_model(model_cfg, len(desc["classes"]), desc["channels"])
    model.load_state_dict(load_weights(weights))
    model.eval()
    costs = model_costs(model)  # on the CPU, before the model moves
    model.to(torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
    transform = build_transform(False, model_cfg["img_size"], desc)
    per_split = {s: predict_exits(model, open_split(prepared, s, transform), eval_cfg.get("batch_size", 256),
                                  eval_cfg.get("workers", 0)) for s in EVAL_SPLITS}
    exit_costs = costs["gflops_per_exit"]
    metrics = {"model": model_name, "seed": seed, "family": model.family, "costs": costs, "splits": {}}
    for split, d in per_split.items():
        metrics["splits"][split] = {
            "n": int(len(d["label"])),
            "top1_per_exit": d["correct"].mean(0).tolist(),
            "early_exit_sweep": sweep(d["pred"], d["prob"], d["label"], exit_costs),
        }
    if model.family == "recursive":
        metrics["traces"] = recursive_traces(model, open_split(prepared, "test", transform),
                                             eval_cfg.get("trace_images", 256))
    metrics["timing"] = time_exits(model, batch=eval_cfg.get("timing_batch", 256),
                                   warmup=eval_cfg.get("timing_warmup", 1), repeats=eval_cfg.get("timing_repeats", 3),
                                   latency_repeats=eval_cfg.get("latency_repeats", 10))
    out_dir.mkdir(parents=True, exist_ok=True)
    save_predictions(out_dir / "predictions.npz", per_split)
    write_json(out_dir / "metrics.json", metrics)
    return metrics
