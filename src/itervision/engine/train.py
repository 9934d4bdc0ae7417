"""Training loop for every model family: the SparseFormer recipe, one loop read top to bottom.

set-up (seed, model, batches, optimiser, schedule, soft targets, EMA) -> resume -> steps (lr of the step,
soft targets, forward all exits, weighted soft-target CE + auxiliary losses, clip, step) -> at each curve
point the last exit's top-1 on a fixed slice of calib and test -> a checkpoint at every curve point and
epoch end -> final weights and log.

Determinism and pairing: the run seed sets the initialisation, the image order and every augmentation
(batch b of epoch e is a pure function of (seed, e, b, rank), see data/loaders.py). The forward pass's own
randomness (drop path) is re-seeded at each epoch start from (seed, epoch, rank), and checkpoints keep the
generator states, so a run resumed from any checkpoint replays exactly what an uninterrupted run does.
"""
from __future__ import annotations

import os
import random
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from itervision.data.loaders import batch_seed, describe_prepared, eval_batches, global_seed, train_batches
from itervision.engine.checkpoint import code_fingerprint, load_checkpoint, run_fingerprint, save_checkpoint
from itervision.engine.distributed import all_gather_objects, all_reduce_mean, init_distributed, is_main
from itervision.engine.recipe import SoftTargets, build_ema, build_optimizer, lr_at, peak_lr, soft_target_ce
from itervision.errors import UserError
from itervision.evaluation.predict import predict_exits, top1_per_exit
from itervision.models.registry import build_model
from itervision.runs import RunRecord


class TrainingDiverged(UserError):
    pass


def seed_everything(seed: int) -> None:
    seed = int(seed) % (2 ** 31)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def epoch_seed(seed: int, epoch: int, rank: int = 0) -> int:
    return ((seed * 1_000_003 + epoch) * 1009 + rank + 1) % (2 ** 31)


def process_age() -> float | None:
    """Seconds since this process started (Linux), for the start-up time of a run."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def curve_steps(total: int, points: int) -> list[int]:
    """Evenly spaced steps of the learning curve, the last at the end of training."""
    return sorted({max(1, round(total * i / points)) for i in range(1, points + 1)}) if points else []


def _rng_state(device) -> dict:
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict, device) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def train_run(*, record: RunRecord, model_cfg: dict, train_cfg: dict, prepared: str | Path, progress: bool = True,
              step_hook=None) -> dict:
    """Train one run; rank 0 writes its weights and training log into the run folder and returns the log.

    `step_hook(step, loss) -> loss` is for tests (inject a NaN, stop the process at a step)."""
    cfg, model_name, seed = train_cfg, record.model, record.seed
    prepared = Path(prepared)
    if cfg["threads"]:
        torch.set_num_threads(cfg["threads"])
    rank, world, device = init_distributed()
    desc = describe_prepared(prepared)
    num_classes = len(desc["classes"])
    fingerprint = run_fingerprint(model=model_cfg, train=cfg, data=desc["fingerprint"], seed=seed, world=world,
                                  code=code_fingerprint())

    # ---- model, data, optimiser, schedule
    seed_everything(seed)
    raw_model = build_model(model_cfg, num_classes, desc["channels"]).to(device)
    model = raw_model
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(raw_model, device_ids=[device.index]
                                                          if device.index is not None else None)
    batches = train_batches(prepared, model_cfg["img_size"], cfg, seed=seed, rank=rank, world=world,
                            pin_memory=device.type == "cuda")
    steps_per_epoch = len(batches)
    if steps_per_epoch == 0:
        raise UserError(f"the train split of {prepared} has fewer images than one batch of {cfg['batch_size']} "
                        f"per process; lower train.batch_size")
    total = cfg["epochs"] * steps_per_epoch
    warmup = int(cfg["warmup_epochs"] * steps_per_epoch)
    optimizer = build_optimizer(raw_model, cfg, world)
    peak = peak_lr(cfg, world)
    targets = SoftTargets(cfg, num_classes)
    ema = build_ema(raw_model, cfg["ema_decay"]) if cfg["ema"] else None
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg["amp"])
    scaler = torch.amp.GradScaler(device.type, enabled=cfg["amp"] == "fp16" and device.type == "cuda")
    weights = torch.tensor(raw_model.exit_loss_weights(), device=device)
    curve_at = curve_steps(total, cfg["curve_points"])

    def curve_point(step: int) -> dict:
        scored = ema.module if ema is not None else raw_model
        row = {"step": step, "images": step * cfg["batch_size"] * world}
        for split in ("calib", "test"):
            pred = predict_exits(scored, eval_batches(prepared, split, model_cfg["img_size"], 512,
                                                      limit=cfg["curve_images"], interpolation=cfg["interpolation"]))
            row[f"{split}_top1"] = top1_per_exit(pred)[-1]
        return row

    # ---- resume
    ckpt_path = record.checkpoint_dir / "last.pt"
    step, log, curve, acc = 0, [], [], None
    state = load_checkpoint(ckpt_path, fingerprint)
    if state is not None:
        raw_model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        if ema is not None:
            ema.load_state_dict(state["ema"])
        step, log, curve, acc = state["step"], state["log"], state["curve"], state["epoch_acc"]
        _set_rng_state(state["rng"][rank], device)
        if is_main() and progress:
            tqdm.write(f"resuming {model_name} seed {seed} at step {step} of {total}")

    startup, saved_step = process_age(), step
    while step < total:
        epoch, start = divmod(step, steps_per_epoch)
        if start == 0:
            seed_everything(epoch_seed(seed, epoch, rank))  # drop path etc. of this epoch
            acc = {"loss": 0.0, "aux": 0.0, "exit_loss": [0.0] * len(weights), "images": 0, "seconds": 0.0}
        model.train()
        with tqdm(total=steps_per_epoch, initial=start, desc=f"{model_name} s{seed} ep {epoch + 1}/{cfg['epochs']}",
                  leave=False, disable=not (progress and is_main()), mininterval=2.0, unit="step") as bar:
            t0 = time.perf_counter()
            for b, img, target in batches.epoch(epoch, start):
                lr = lr_at(step, total, warmup, peak, cfg["min_lr"], cfg["warmup_lr"])
                for group in optimizer.param_groups:
                    group["lr"] = lr
                img, target = img.to(device, non_blocking=True), target.to(device, non_blocking=True)
                with global_seed(batch_seed(seed, epoch, b, rank)):  # mixup draws from NumPy's generator
                    img, soft = targets(img, target)
                with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                    out = model(img)
                exit_losses = torch.stack([soft_target_ce(lg, soft) for lg in out["logits"]])
                loss = (weights * exit_losses).sum() + out["aux_loss"].float()
                if step_hook is not None:
                    loss = step_hook(step, loss)
                reduced = all_reduce_mean(torch.cat([loss.detach()[None], exit_losses.detach(),
                                                     out["aux_loss"].detach().float()[None]]).float()).cpu()
                if not torch.isfinite(reduced[0]):
                    good = f"{ckpt_path} (step {saved_step})" if saved_step else "none yet"
                    raise TrainingDiverged(
                        f"loss is {reduced[0].item()} at epoch {epoch + 1}, step {b + 1} (global step {step + 1}) of "
                        f"{model_name} seed {seed}; last good checkpoint: {good}; lower train.lr or raise "
                        f"train.warmup_epochs")
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                if cfg["clip_grad"]:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(raw_model.parameters(), cfg["clip_grad"])
                scaler.step(optimizer)
                scaler.update()
                if ema is not None:
                    ema.update_parameters(raw_model)
                step += 1
                acc["loss"] += reduced[0].item()
                acc["exit_loss"] = [a + v for a, v in zip(acc["exit_loss"], reduced[1:-1].tolist())]
                acc["aux"] += reduced[-1].item()
                acc["images"] += img.shape[0] * world
                now = time.perf_counter()
                bar.update()
                bar.set_postfix(loss=f"{reduced[0].item():.3f}",
                                img_s=f"{acc['images'] / (acc['seconds'] + now - t0):.0f}", refresh=False)
                epoch_end = b == steps_per_epoch - 1
                if step in curve_at or epoch_end:
                    acc["seconds"] += now - t0  # curve points and checkpoints are not training time
                    if epoch_end:
                        n = steps_per_epoch
                        row = {"epoch": epoch + 1, "loss": acc["loss"] / n, "aux_loss": acc["aux"] / n, "lr": lr,
                               "images": acc["images"], "seconds": acc["seconds"],
                               "images_per_s": acc["images"] / acc["seconds"]}
                        row.update({f"loss_exit{i + 1}": v / n for i, v in enumerate(acc["exit_loss"])})
                        log.append(row)
                        if progress and is_main():
                            tqdm.write(f"{model_name} s{seed} epoch {epoch + 1}/{cfg['epochs']}: "
                                       f"loss {row['loss']:.4f}, "
                                       f"{row['images_per_s']:.0f} img/s, {row['seconds']:.1f} s")
                    if step in curve_at and is_main():
                        curve.append(curve_point(step))
                    rng = all_gather_objects(_rng_state(device))
                    if is_main():
                        save_checkpoint(ckpt_path, {
                            "model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
                            "scaler": scaler.state_dict(), "ema": ema.state_dict() if ema is not None else None,
                            "step": step, "log": log, "curve": curve, "epoch_acc": acc, "rng": rng,
                            "fingerprint": fingerprint})
                    saved_step = step
                    t0 = time.perf_counter()

    summary = {}
    if is_main():
        timed = log[1:] or log  # the first epoch includes warm-up effects
        summary = {
            "model": model_name, "seed": seed, "world_size": world, "fingerprint": fingerprint,
            "data_fingerprint": desc["fingerprint"], "epochs": cfg["epochs"], "steps_per_epoch": steps_per_epoch,
            "global_batch": cfg["batch_size"] * world, "images_seen": total * cfg["batch_size"] * world,
            "train_images": desc["counts"].get("train"), "seconds": sum(r["seconds"] for r in log),
            "seconds_per_epoch": float(np.mean([r["seconds"] for r in timed])),
            "images_per_s": float(np.mean([r["images_per_s"] for r in timed])),
            "startup_seconds": startup, "final_loss": log[-1]["loss"], "log": log, "curve": curve,
        }
        record.write_weights((ema.module if ema is not None else raw_model).state_dict())
        record.write_train_log(summary)
    if world > 1:
        torch.distributed.barrier()
    return summary
