"""Predictions at every exit: one pass over a split, keeping per image and exit the predicted class and the top
softmax probability (all that accuracy, early exit and McNemar need later), and recursive traces."""
from __future__ import annotations

import numpy as np
import torch

from itervision.engine.heartbeat import Heartbeat


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
    """Sparsity, expert shares and attention mass per role per step, on the first `images` images."""
    chunks, n = [], 0
    for img, _ in batches:
        chunks.append(img)
        n += len(img)
        if n >= images:
            break
    model.eval()
    return model(torch.cat(chunks)[:images].to(model_device(model)), trace=True)["trace"]
