"""The recipe's pieces around the loop: optimiser groups, learning-rate schedule, soft targets, EMA.

The optimiser, the schedule and EMA come from torch (AdamW, a per-iteration schedule function,
swa_utils.AveragedModel); mixup/CutMix from timm, imported only when the recipe uses them (importing timm
imports torchvision and torch._dynamo, seconds per process, which a CPU-scale run without mixing does not pay).
The schedule follows timm's CosineLRScheduler with t_in_epochs=False: linear warm-up from `warmup_lr` to the
peak over the warm-up steps, then a cosine from the peak to `min_lr` over the whole run (step counted from 0,
warm-up included). `train` is always the typed recipe (run_configs.TrainConfig).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def build_optimizer(model: torch.nn.Module, train) -> torch.optim.AdamW:
    """AdamW at the peak lr; no weight decay on 1-D parameters (norms, biases) and on model.no_weight_decay()
    (e.g. token boxes)."""
    skip = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.ndim <= 1 or name in skip else decay).append(p)
    groups = [{"params": decay, "weight_decay": train.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=train.peak_lr())


def lr_at(step: int, total: int, warmup: int, peak: float, min_lr: float, warmup_lr: float) -> float:
    if step < warmup:
        return warmup_lr + (peak - warmup_lr) * step / warmup
    return min_lr + 0.5 * (peak - min_lr) * (1 + math.cos(math.pi * step / total))


def lr_schedule(train, steps_per_epoch: int):
    """(total steps, step -> lr) of a run with `steps_per_epoch` optimiser steps an epoch."""
    total = train.epochs * steps_per_epoch
    warmup = int(train.warmup_epochs * steps_per_epoch)
    peak = train.peak_lr()
    return total, lambda step: lr_at(step, total, warmup, peak, train.min_lr, train.warmup_lr)


def soft_target_ce(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.sum(-target * F.log_softmax(logits.float(), dim=-1), dim=-1).mean()


def exit_losses(logits: list, soft: torch.Tensor) -> torch.Tensor:
    """Soft-target cross-entropy of every exit, one tensor (one kernel per exit, no host read)."""
    return torch.stack([soft_target_ce(lg, soft) for lg in logits])


def step_loss(out: dict, soft: torch.Tensor, exit_weights: torch.Tensor):
    """The training loss of one forward pass: the exits' soft-target cross-entropies weighted by the model's
    exit_loss_weights, plus the model's auxiliary loss. Returns (loss, loss per exit, aux) on the device. The one
    definition the engine, the op count and the benchmarks share."""
    losses = exit_losses(out["logits"], soft)
    aux = out["aux_loss"].float()
    return (exit_weights * losses).sum() + aux, losses, aux


class SoftTargets:
    """Labels -> soft targets: timm's Mixup/CutMix (with label smoothing) when the recipe mixes, else smoothed
    one-hot labels. Mixing draws from NumPy's global generator, which the caller seeds per batch."""

    def __init__(self, train, num_classes: int):
        self.num_classes, self.smoothing = num_classes, train.label_smoothing
        self.mixup = None
        if train.mixup > 0 or train.cutmix > 0:
            from timm.data import Mixup

            self.mixup = Mixup(mixup_alpha=train.mixup, cutmix_alpha=train.cutmix, prob=train.mix_prob,
                               label_smoothing=self.smoothing, num_classes=num_classes)

    def __call__(self, img: torch.Tensor, target: torch.Tensor):
        if self.mixup is not None:
            return self.mixup(img, target)
        # one-hot by scatter: F.one_hot reads its labels' range back to the host (a device sync per step)
        off = self.smoothing / self.num_classes
        soft = torch.full((len(target), self.num_classes), off, device=target.device)
        return img, soft.scatter_(1, target[:, None], 1 - self.smoothing + off)


def build_ema(model: torch.nn.Module, decay: float):
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)
