"""Training loop for every model family: the SparseFormer recipe built from timm pieces.

Read top to bottom: set-up (seed, model, data, optimiser, schedule, mixup, EMA) -> resume -> epochs
(forward all exits, weighted soft-target CE + auxiliary losses, clip, step, per-iteration schedule) ->
checkpoint every epoch -> final weights and per-epoch log.

Determinism and pairing: the run seed sets the initialisation, the sampler order (seed, epoch) and the
augmentation streams; every epoch re-seeds all generators from (seed, epoch, rank), so a run resumed from
an epoch checkpoint replays exactly what an uninterrupted run does. Augmentation runs in DataLoader workers
seeded from a generator of their own, so two variants with the same seed see the same images and
augmentations, whatever randomness their forward pass uses.
"""
from __future__ import annotations

import math
import os
import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from itervision.data.loaders import SeededDraws, build_transform, dataset_description, open_split
from itervision.engine.checkpoint import config_fingerprint, load_checkpoint, save_checkpoint
from itervision.engine.distributed import (RepeatedAugmentationSampler, all_reduce_mean, cleanup, init_distributed,
                                           is_main)
from itervision.errors import UserError
from itervision.io import atomic_path, write_json, write_text
from itervision.models import build_model

TRAIN_DEFAULTS = {
    "epochs": 2, "batch_size": 128, "lr": 1e-3, "lr_batch": 128, "min_lr": 1e-5, "warmup_epochs": 0.0,
    "warmup_lr": 1e-6, "weight_decay": 0.05, "randaugment": "rand-m9-mstd0.5-inc1", "crop_scale": [0.08, 1.0],
    "hflip": 0.5, "interpolation": "bicubic", "mixup": 0.8, "cutmix": 1.0, "mix_prob": 1.0,
    "label_smoothing": 0.1, "random_erasing": 0.25, "repeated_aug": 3, "clip_grad": 5.0, "amp": "none",
    "ema": False, "ema_decay": 0.9998, "workers": 0, "threads": 0,
}


class TrainingDiverged(UserError):
    pass


def seed_everything(seed: int) -> None:
    seed = int(seed) % (2 ** 31)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def epoch_seed(seed: int, epoch: int, rank: int = 0) -> int:
    return ((seed * 1_000_003 + epoch) * 1009 + rank + 1) % (2 ** 31)


def resolve_train_config(train: dict) -> dict:
    unknown = sorted(set(train) - set(TRAIN_DEFAULTS))
    if unknown:
        raise UserError(f"unknown train keys {', '.join(unknown)}; valid keys: {', '.join(sorted(TRAIN_DEFAULTS))}")
    cfg = {**TRAIN_DEFAULTS, **train}
    if cfg["amp"] not in ("none", "bf16", "fp16"):
        raise UserError(f"train.amp must be none, bf16 or fp16, got {cfg['amp']!r}")
    if cfg["batch_size"] < 2 or (cfg["mixup"] or cfg["cutmix"]) and cfg["batch_size"] % 2:
        raise UserError("train.batch_size must be even and >= 2 (mixup pairs images within a batch)")
    return cfg


def soft_target_ce(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.sum(-target * F.log_softmax(logits.float(), dim=-1), dim=-1).mean()


def _faults() -> dict:
    """Fault injection for tests: ITERVISION_FAULT='crash_at_step=5' or 'nan_at_step=3'."""
    spec = os.environ.get("ITERVISION_FAULT", "")
    out = {}
    for part in filter(None, spec.split(",")):
        key, _, value = part.partition("=")
        out[key.strip()] = int(value)
    return out


def build_optimizer(model, cfg: dict, world: int):
    from timm.optim import create_optimizer_v2

    lr = cfg["lr"] * cfg["batch_size"] * world / cfg["lr_batch"]  # linear scaling with the global batch
    # timm: no weight decay on 1-D parameters (norms, biases) and on names in model.no_weight_decay() (boxes)
    return create_optimizer_v2(model, "adamw", lr=lr, weight_decay=cfg["weight_decay"])


def train_run(*, model_name: str, model_cfg: dict, train_cfg: dict, prepared: str | Path, seed: int,
              out_dir: str | Path, ckpt_dir: str | Path, progress: bool = True) -> dict:
    """Train one (model, seed). Writes out_dir/{final_weights.pt, train_log.csv, train_log.json}."""
    from timm.data import Mixup
    from timm.scheduler import CosineLRScheduler
    from timm.utils import ModelEmaV3

    cfg = resolve_train_config(train_cfg)
    prepared, out_dir, ckpt_dir = Path(prepared), Path(out_dir), Path(ckpt_dir)
    if cfg["threads"]:
        torch.set_num_threads(cfg["threads"])
    rank, world, device = init_distributed()
    desc = dataset_description(prepared)
    num_classes = len(desc["classes"])
    fingerprint = config_fingerprint(model_cfg, cfg, desc, seed, world)

    # ---- model, data, optimiser, schedule
    seed_everything(seed)
    model = build_model(model_cfg, num_classes, desc["channels"]).to(device)
    raw_model = model
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.index is not None
                                                          else None)
    img_size = model_cfg["img_size"]
    train_set = SeededDraws(open_split(prepared, "train", build_transform(True, img_size, desc, cfg)))
    sampler = RepeatedAugmentationSampler(len(train_set), world, rank, seed, repeats=cfg["repeated_aug"])
    loader = torch.utils.data.DataLoader(train_set, batch_size=cfg["batch_size"], sampler=sampler, drop_last=True,
                                         num_workers=cfg["workers"], persistent_workers=False,  # workers must see epoch_seed
                                         pin_memory=device.type == "cuda")
    steps_per_epoch = len(loader)
    if steps_per_epoch == 0:
        raise UserError(f"train split has {len(train_set)} images, fewer than one batch of {cfg['batch_size']}")
    total_steps = cfg["epochs"] * steps_per_epoch
    optimizer = build_optimizer(raw_model, cfg, world)
    scheduler = CosineLRScheduler(optimizer, t_initial=total_steps, lr_min=cfg["min_lr"],
                                  warmup_t=int(cfg["warmup_epochs"] * steps_per_epoch),
                                  warmup_lr_init=cfg["warmup_lr"], t_in_epochs=False)
    mixup = None
    if cfg["mixup"] > 0 or cfg["cutmix"] > 0:
        mixup = Mixup(mixup_alpha=cfg["mixup"], cutmix_alpha=cfg["cutmix"], prob=cfg["mix_prob"],
                      label_smoothing=cfg["label_smoothing"], num_classes=num_classes)
    ema = ModelEmaV3(raw_model, decay=cfg["ema_decay"]) if cfg["ema"] else None
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg["amp"])
    scaler = torch.amp.GradScaler(device.type, enabled=cfg["amp"] == "fp16" and device.type == "cuda")
    weights = torch.tensor(raw_model.exit_loss_weights())

    # ---- resume
    ckpt_path = ckpt_dir / "last.pt"
    log_rows, start_epoch = [], 0
    state = load_checkpoint(ckpt_path, fingerprint)
    if state is not None:
        raw_model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        if ema is not None:
            ema.load_state_dict(state["ema"])
        log_rows, start_epoch = state["log"], state["epoch"] + 1
        if is_main() and progress:
            tqdm.write(f"resuming {model_name} seed {seed} after epoch {start_epoch}")

    faults = _faults()
    step = start_epoch * steps_per_epoch
    for epoch in range(start_epoch, cfg["epochs"]):
        seed_everything(epoch_seed(seed, epoch, rank))
        train_set.epoch_seed = epoch_seed(seed, epoch)  # augmentation: same for every rank layout
        sampler.set_epoch(epoch)
        model.train()
        exit_loss_sum = torch.zeros(len(weights))
        aux_sum, images, t0 = 0.0, 0, time.perf_counter()
        bar = tqdm(loader, desc=f"{model_name} s{seed} ep {epoch + 1}/{cfg['epochs']}", leave=False,
                   disable=not (progress and is_main()), mininterval=2.0)
        for img, target in bar:
            img, target = img.to(device, non_blocking=True), target.to(device, non_blocking=True)
            if mixup is not None:
                img, soft = mixup(img, target)
            else:
                soft = F.one_hot(target, num_classes).float() * (1 - cfg["label_smoothing"]) \
                    + cfg["label_smoothing"] / num_classes
            with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                out = model(img)
            exit_losses = torch.stack([soft_target_ce(lg, soft) for lg in out["logits"]])
            loss = (weights.to(device) * exit_losses).sum() + out["aux_loss"].float()
            if faults.get("nan_at_step") == step:
                loss = loss * float("nan")
            if faults.get("crash_at_step") == step:
                os._exit(137)  # simulate a kill (SIGKILL-like: no clean-up, no checkpoint)
            reduced = all_reduce_mean(torch.cat([loss.detach()[None], exit_losses.detach()]).float()).cpu()
            if not torch.isfinite(reduced[0]):
                good = f"{ckpt_path} (after epoch {log_rows[-1]['epoch']})" if log_rows else "none yet"
                raise TrainingDiverged(
                    f"loss is {reduced[0].item()} at epoch {epoch + 1}, step {step - epoch * steps_per_epoch + 1} "
                    f"(global step {step + 1}) of {model_name} seed {seed}; last good checkpoint: {good}; "
                    f"lower train.lr or raise train.warmup_epochs")
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            if cfg["clip_grad"]:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(raw_model.parameters(), cfg["clip_grad"])
            scaler.step(optimizer)
            scaler.update()
            step += 1
            scheduler.step_update(step)
            if ema is not None:
                ema.update(raw_model, step=step)
            exit_loss_sum += reduced[1:]
            aux_sum += float(out["aux_loss"].detach())
            images += img.shape[0] * world
            bar.set_postfix(loss=f"{reduced[0].item():.3f}", img_s=f"{images / (time.perf_counter() - t0):.0f}",
                            refresh=False)  # the bar redraws at most every 2 s
        seconds = time.perf_counter() - t0
        n = steps_per_epoch
        row = {"epoch": epoch + 1, "loss": float((weights * exit_loss_sum / n).sum() + aux_sum / n),
               "aux_loss": aux_sum / n, "lr": optimizer.param_groups[0]["lr"], "images": images,
               "seconds": seconds, "images_per_s": images / seconds}
        row.update({f"loss_exit{i + 1}": float(v / n) for i, v in enumerate(exit_loss_sum)})
        log_rows.append(row)
        if is_main():
            save_checkpoint(ckpt_path, {
                "model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                "ema": ema.state_dict() if ema is not None else None, "epoch": epoch, "log": log_rows,
                "fingerprint": fingerprint})
            if progress:
                tqdm.write(f"{model_name} s{seed} epoch {epoch + 1}/{cfg['epochs']}: loss {row['loss']:.4f} "
                           f"{row['images_per_s']:.0f} img/s {seconds:.1f} s")
        if world > 1:
            torch.distributed.barrier()

    summary = {}
    if is_main():
        final = (ema.module if ema is not None else raw_model).state_dict()
        out_dir.mkdir(parents=True, exist_ok=True)
        with atomic_path(out_dir / "final_weights.pt") as tmp:
            torch.save(final, tmp)
        timed = log_rows[1:] or log_rows  # the first epoch includes warm-up effects
        summary = {
            "model": model_name, "seed": seed, "world_size": world, "fingerprint": fingerprint,
            "epochs": cfg["epochs"], "steps_per_epoch": steps_per_epoch,
            "seconds_per_epoch": float(np.mean([r["seconds"] for r in timed])),
            "images_per_s": float(np.mean([r["images_per_s"] for r in timed])),
            "final_loss": log_rows[-1]["loss"] if log_rows else None, "log": log_rows,
        }
        cols = list(log_rows[0]) if log_rows else []
        write_text(out_dir / "train_log.csv", ",".join(cols) + "\n"
                   + "".join(",".join(f"{r[c]:.6g}" if isinstance(r[c], float) else str(r[c]) for c in cols) + "\n"
                             for r in log_rows))
        write_json(out_dir / "train_log.json", summary)
    if world > 1:
        torch.distributed.barrier()
    return summary


def finish() -> None:
    cleanup()
