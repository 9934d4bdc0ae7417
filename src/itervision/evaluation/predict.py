"""Predictions at every exit: one pass over a split, keeping per image and exit the predicted class and the top
softmax probability (all that accuracy, early exit and McNemar need later), and recursive traces."""
from __future__ import annotations

import numpy as np
import torch

from itervision.heartbeat import Heartbeat


def model_device(model) -> torch.device:
    return next(model.parameters()).device


@torch.inference_mode()
def predict_exits(model, batches) -> dict:
    """{"pred": (N, E) int32, "prob": (N, E) float32, "label": (N,) int64} over (images, labels) batches."""
    was_training = model.training
    model.eval()
    device = model_device(model)
    preds, probs, labels = [], [], []
    heartbeat = Heartbeat()  # the launcher's stall watch sees evaluation progress too
    for img, target in batches:
        heartbeat.beat("evaluate", images=sum(len(x) for x in labels))
        logits = torch.stack(model(img.to(device))["logits"], 1).float()  # B, E, C
        top, pred = logits.softmax(-1).max(-1)
        preds.append(pred.to(torch.int32).cpu())
        probs.append(top.cpu())
        labels.append(target.cpu())
    model.train(was_training)
    return {"pred": torch.cat(preds).numpy(), "prob": torch.cat(probs).numpy().astype(np.float32),
            "label": torch.cat(labels).numpy().astype(np.int64)}


def top1_per_exit(pred: dict) -> list[float]:
    return (pred["pred"] == pred["label"][:, None]).mean(0).tolist()


@torch.inference_mode()
def recursive_traces(model, batches, images: int) -> dict:
    """Sparsity, expert shares and attention mass per role per step, on the first `images` images; and the
    feedback probe: last-step top-1 with the model's own predictions fed back as y, with the true class, and with
    a wrong one (the next class) from step 2 on. If y matters, the wrong class costs accuracy."""
    chunks, labels, n = [], [], 0
    for img, label in batches:
        chunks.append(img)
        labels.append(label)
        n += len(img)
        if n >= images:
            break
    model.eval()
    img = torch.cat(chunks)[:images].to(model_device(model))
    label = torch.cat(labels)[:images].to(img.device)
    out = model(img, trace=True)
    trace = out["trace"]
    wrong = (label + 1) % out["logits"][-1].shape[-1]

    def last_top1(logits) -> float:
        return float((logits[-1].argmax(-1) == label).float().mean())

    trace["feedback"] = {"images": int(len(label)), "own": last_top1(out["logits"]),
                         "true_y": last_top1(model(img, y_given=label)["logits"]),
                         "wrong_y": last_top1(model(img, y_given=wrong)["logits"])}
    return trace
