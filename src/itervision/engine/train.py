"""Training loop for every model family: the SparseFormer recipe, read top to bottom.

    train_run
      set_up            seed, model, batches, optimiser, schedule, soft targets, EMA, fingerprint
      resume            the checkpoint of this exact run, if any
      train_one_epoch   per step: lr, soft targets, forward every exit (micro-batches accumulate), weighted
                        soft-target CE + auxiliary losses, backward, clip, AdamW, EMA;
                        at each curve point the last exit's top-1 on a fixed slice of calib and test;
                        a checkpoint at every curve point and epoch end, or every train.checkpoint_minutes,
                        written in the background (engine/checkpoint.CheckpointWriter); a heartbeat file for
                        the launcher (heartbeat.py)
      summarise         final weights and the training log (rank 0)

Batch and learning rate: `global_batch` images per optimiser step over all processes, each process taking
global_batch / world (run_configs.TrainConfig), so a run on 1, 2 or 8 GPUs follows one recipe.

Determinism and pairing: the run seed sets the initialisation, the image order and every augmentation (batch b
of epoch e is a pure function of (seed, e, b, rank), see data/loaders.py). The forward pass's own randomness
(drop path) is re-seeded at each epoch start from (seed, epoch, rank), and checkpoints keep the generator
states, so a run resumed from any checkpoint replays exactly what an uninterrupted run does. The thread count
(`train.threads`) is part of the recipe of a CPU run: CPU results depend on it. Hardware knobs (loader workers,
checkpoint interval) are not: run_configs.TrainConfig.fingerprinted says what the fingerprint covers.

Host reads: the step itself reads nothing back from the device. The losses of the steps since the last read
are fetched together (every step on the CPU, where a read costs nothing; every SYNC_EVERY steps and at every
checkpoint on a GPU), and a non-finite loss stops the run naming its exact step.
"""
from __future__ import annotations

import contextlib
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from itervision.data.loaders import batch_seed, describe_prepared, eval_batches, global_seed, train_batches
from itervision.engine.checkpoint import CheckpointWriter, code_fingerprint, load_checkpoint, run_fingerprint
from itervision.heartbeat import Heartbeat
from itervision.engine.distributed import all_gather_objects, all_reduce_mean, init_distributed, is_main
from itervision.engine.recipe import SoftTargets, build_ema, build_optimizer, lr_schedule, step_loss
from itervision.errors import UserError
from itervision.evaluation.predict import predict_exits, top1_per_exit
from itervision.models.registry import build_model
from itervision.runs import RunRecord

SYNC_EVERY = 25  # GPU: steps between reads of the logged losses


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


def training_fingerprint(spec, train, data_fingerprint: str, seed: int, world: int, device_type: str = "cpu") -> str:
    """What a run's checkpoints and its config.json are tied to: model, recipe (less its hardware knobs, and less
    the CPU pin where a GPU computes), data, seed, world size, the kind of device, and the code this process runs
    (call it once the model's family module is imported)."""
    extra = {} if device_type == "cpu" else {"device": device_type}  # a CPU run's fingerprint as before
    return run_fingerprint(model=spec.to_json(), train=train.fingerprinted(device_type), data=data_fingerprint,
                           seed=seed, world=world, code=code_fingerprint(), **extra)


def compile_step_model(model, mode: str):
    """torch.compile of the model's forward (fullgraph: a graph break is an error, not a silent slowdown);
    `reduce-overhead` captures it in CUDA graphs."""
    if mode == "none":
        return model
    return torch.compile(model, mode=None if mode == "default" else mode, fullgraph=True)


@dataclass
class Setup:
    """Everything a run's steps use, fixed once at the start."""
    record: RunRecord
    train: object            # run_configs.TrainConfig
    img_size: int
    prepared: Path
    rank: int
    world: int
    device: torch.device
    model: torch.nn.Module   # the model itself (its state is what is saved)
    step_model: object       # what the step calls: the model, DDP-wrapped and/or compiled
    batches: object
    steps_per_epoch: int
    total: int
    lr: object               # step -> lr
    batching: object         # run_configs.Batching: this process's share of a step, derived once
    optimizer: torch.optim.Optimizer
    targets: SoftTargets
    ema: object
    amp_dtype: torch.dtype | None
    scaler: torch.amp.GradScaler
    exit_weights: torch.Tensor
    curve_at: set
    data: dict               # describe_prepared
    fingerprint: str
    ckpt_path: Path
    sync_every: int
    writer: CheckpointWriter = field(default_factory=CheckpointWriter)
    heartbeat: Heartbeat = field(default_factory=Heartbeat)
    last_save: float = field(default_factory=time.monotonic)


@dataclass
class TrainState:
    step: int = 0
    log: list = field(default_factory=list)       # one row per finished epoch
    curve: list = field(default_factory=list)     # learning-curve points
    epoch_totals: dict | None = None              # sums over the current epoch's steps
    saved_step: int = 0
    pending: list = field(default_factory=list)   # (step, epoch, batch, losses on the device) not yet read


def set_up(record: RunRecord, spec, train, prepared: str | Path) -> Setup:
    """spec: specs.ModelSpec; train: run_configs.TrainConfig."""
    prepared = Path(prepared)
    torch.set_num_threads(train.threads)
    rank, world, device = init_distributed()
    desc = describe_prepared(prepared)
    if len(desc["classes"]) != spec.num_classes or desc["channels"] != spec.in_chans:
        raise UserError(f"{prepared} has {len(desc['classes'])} classes and {desc['channels']} channels, the resolved "
                        f"config {spec.num_classes} and {spec.in_chans}; rerun `dvc repro`")
    batching = train.batching(world)

    seed_everything(record.seed)
    model = build_model(spec.config).to(device)
    step_model = compile_step_model(model, train.compile)  # compiled first: DDP's bucketing would split the graph
    if world > 1:
        step_model = torch.nn.parallel.DistributedDataParallel(step_model, device_ids=[device.index]
                                                               if device.index is not None else None)
    batches = train_batches(prepared, spec.config.img_size, train, batching, seed=record.seed, rank=rank,
                            device=device)
    if len(batches) == 0:
        raise UserError(f"the train split of {prepared} has fewer images than one batch of "
                        f"{batching.per_process} per process; lower train.global_batch")
    total, lr = lr_schedule(train, len(batches))
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(train.amp)
    fingerprint = training_fingerprint(spec, train, desc["fingerprint"], record.seed, world, device.type)
    return Setup(record=record, train=train, img_size=spec.config.img_size, prepared=prepared, rank=rank,
                 world=world, device=device, model=model, step_model=step_model, batches=batches,
                 steps_per_epoch=len(batches), total=total, lr=lr, batching=batching,
                 optimizer=build_optimizer(model, train), targets=SoftTargets(train, spec.num_classes),
                 ema=build_ema(model, train.ema_decay) if train.ema else None, amp_dtype=amp_dtype,
                 scaler=torch.amp.GradScaler(device.type, enabled=train.amp == "fp16" and device.type == "cuda"),
                 exit_weights=torch.tensor(model.exit_loss_weights(), device=device),
                 curve_at=set(curve_steps(total, train.curve_points)), data=desc, fingerprint=fingerprint,
                 ckpt_path=record.checkpoint_dir / "last.pt", sync_every=1 if device.type == "cpu" else SYNC_EVERY)


def resume(s: Setup, progress: bool) -> TrainState:
    state = load_checkpoint(s.ckpt_path, s.fingerprint)
    if state is None:
        return TrainState()
    s.model.load_state_dict(state["model"])
    s.optimizer.load_state_dict(state["optimizer"])
    s.scaler.load_state_dict(state["scaler"])
    if s.ema is not None:
        s.ema.load_state_dict(state["ema"])
    _set_rng_state(state["rng"][s.rank], s.device)
    if is_main() and progress:
        tqdm.write(f"resuming {s.record.model} seed {s.record.seed} at step {state['step']} of {s.total}")
    return TrainState(step=state["step"], log=state["log"], curve=state["curve"], epoch_totals=state["epoch_acc"],
                      saved_step=state["step"])


def train_step(s: Setup, img, target, step: int, epoch: int, batch: int, step_hook=None) -> torch.Tensor:
    """One optimiser step; returns [loss, loss per exit..., aux loss] averaged over processes, on the device."""
    lr = s.lr(step)
    for group in s.optimizer.param_groups:
        group["lr"] = lr
    img, target = img.to(s.device, non_blocking=True), target.to(s.device, non_blocking=True)
    with global_seed(batch_seed(s.record.seed, epoch, batch, s.rank)):  # mixup draws from NumPy's generator
        img, soft = s.targets(img, target)
    s.optimizer.zero_grad(set_to_none=True)
    logged = 0
    accumulation = s.batching.accumulation
    for i, (x, y) in enumerate(zip(img.chunk(accumulation), soft.chunk(accumulation))):
        last = i == accumulation - 1
        no_sync = s.step_model.no_sync if hasattr(s.step_model, "no_sync") and not last else contextlib.nullcontext
        with no_sync():
            if s.train.compile == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            with torch.autocast(s.device.type, dtype=s.amp_dtype or torch.float32, enabled=s.amp_dtype is not None):
                out = s.step_model(x)
            loss, losses, aux = step_loss(out, y, s.exit_weights)
            if step_hook is not None:
                loss = step_hook(step, loss)
            s.scaler.scale(loss / accumulation).backward()
        logged = logged + torch.cat([loss.detach()[None], losses.detach(), aux.detach()[None]]) / accumulation
    if s.train.clip_grad:
        s.scaler.unscale_(s.optimizer)
        torch.nn.utils.clip_grad_norm_(s.model.parameters(), s.train.clip_grad)
    s.scaler.step(s.optimizer)
    s.scaler.update()
    if s.ema is not None:
        s.ema.update_parameters(s.model)
    return all_reduce_mean(logged)


def read_losses(s: Setup, state: TrainState) -> None:
    """Fetch the pending losses (one host read), stop on the first non-finite one, add them to the epoch."""
    if not state.pending:
        return
    values = torch.stack([p[3] for p in state.pending]).float().cpu()
    bad = (~torch.isfinite(values[:, 0])).nonzero()
    if len(bad):
        step, epoch, batch, _ = state.pending[int(bad[0])]
        good = f"{s.ckpt_path} (step {state.saved_step})" if state.saved_step else "none yet"
        raise TrainingDiverged(
            f"loss is {values[int(bad[0]), 0].item()} at epoch {epoch + 1}, step {batch + 1} (global step "
            f"{step + 1}) of {s.record.model} seed {s.record.seed}; last good checkpoint: {good}; lower train.lr or "
            f"raise train.warmup_epochs")
    totals = state.epoch_totals
    totals["loss"] += float(values[:, 0].sum())
    totals["exit_loss"] = [a + float(v) for a, v in zip(totals["exit_loss"], values[:, 1:-1].sum(0))]
    totals["aux"] += float(values[:, -1].sum())
    state.pending.clear()


def curve_point(s: Setup, step: int) -> dict:
    """The last exit's top-1 on the first curve_images images of calib and of test."""
    scored = s.ema.module if s.ema is not None else s.model
    row = {"step": step, "images": step * s.train.global_batch}
    for split in ("calib", "test"):
        pred = predict_exits(scored, eval_batches(s.prepared, split, s.img_size, 512, limit=s.train.curve_images,
                                                  interpolation=s.train.interpolation))
        row[f"{split}_top1"] = top1_per_exit(pred)[-1]
    return row


def save(s: Setup, state: TrainState) -> None:
    """A checkpoint of the state after `state.step` (rank 0 writes it in the background)."""
    rng = all_gather_objects(_rng_state(s.device))
    s.last_save = time.monotonic()
    if is_main():
        s.writer.save(s.ckpt_path, {
            "model": s.model.state_dict(), "optimizer": s.optimizer.state_dict(), "scaler": s.scaler.state_dict(),
            "ema": s.ema.state_dict() if s.ema is not None else None, "step": state.step, "log": state.log,
            "curve": state.curve, "epoch_acc": state.epoch_totals, "rng": rng, "fingerprint": s.fingerprint})
    state.saved_step = state.step


def train_one_epoch(s: Setup, state: TrainState, progress: bool, step_hook=None) -> None:
    """From the current step to the end of its epoch."""
    epoch, start = divmod(state.step, s.steps_per_epoch)
    if start == 0:
        seed_everything(epoch_seed(s.record.seed, epoch, s.rank))  # drop path etc. of this epoch
        state.epoch_totals = {"loss": 0.0, "aux": 0.0, "exit_loss": [0.0] * len(s.exit_weights), "images": 0,
                              "seconds": 0.0}
    totals = state.epoch_totals
    s.model.train()
    show = progress and is_main()
    with tqdm(total=s.steps_per_epoch, initial=start, desc=f"{s.record.model} s{s.record.seed} ep {epoch + 1}/"
              f"{s.train.epochs}", leave=False, disable=not show, mininterval=2.0, unit="step") as bar:
        t0 = time.perf_counter()
        for b, img, target in s.batches.epoch(epoch, start):
            state.pending.append((state.step, epoch, b, train_step(s, img, target, state.step, epoch, b, step_hook)))
            state.step += 1
            totals["images"] += img.shape[0] * s.world
            epoch_end = b == s.steps_per_epoch - 1
            curve = state.step in s.curve_at
            read_point = curve or epoch_end or len(state.pending) >= s.sync_every  # a host read happens anyway
            checkpoint = read_point and checkpoint_due(s, state, curve or epoch_end)
            if read_point:  # a checkpoint is only ever due at a read point
                read_losses(s, state)
                seconds = totals["seconds"] + time.perf_counter() - t0
                rate = totals["images"] / max(seconds, 1e-9)
                bar.set_postfix(loss=f"{totals['loss'] / max(1, b + 1 - start):.3f}", img_s=f"{rate:.0f}",
                                refresh=False)
                if is_main():
                    s.heartbeat.beat("train", step=state.step, total=s.total, epoch=epoch + 1, images_per_s=rate)
            bar.update()
            if not (curve or epoch_end or checkpoint):
                continue
            totals["seconds"] += time.perf_counter() - t0  # curve points and checkpoints are not training time
            if epoch_end:
                state.log.append(epoch_row(s, totals, epoch))
                if show:
                    row = state.log[-1]
                    tqdm.write(f"{s.record.model} s{s.record.seed} epoch {epoch + 1}/{s.train.epochs}: loss "
                               f"{row['loss']:.4f}, {row['images_per_s']:.0f} img/s, {row['seconds']:.1f} s")
            if curve and is_main():
                state.curve.append(curve_point(s, state.step))
            if checkpoint:
                save(s, state)
            t0 = time.perf_counter()


def checkpoint_due(s: Setup, state: TrainState, at_point: bool) -> bool:
    """Checkpoint now? With train.checkpoint_minutes 0: at every curve point and epoch end; otherwise once that
    many minutes passed since the last one, and at the last step. Asked only at the steps where the losses are
    read (a host read then happens anyway), which are the same steps on every process; rank 0's clock decides
    for all (broadcast), so that all of them enter the checkpoint's collective together."""
    if state.step == s.total:
        return True
    minutes = s.train.checkpoint_minutes
    if not minutes:
        return at_point
    due = torch.tensor([time.monotonic() - s.last_save >= 60 * minutes], dtype=torch.int32)
    if s.world > 1:
        due = due.to(s.device)
        torch.distributed.broadcast(due, 0)
    return bool(due.item())


def epoch_row(s: Setup, totals: dict, epoch: int) -> dict:
    n = s.steps_per_epoch
    row = {"epoch": epoch + 1, "loss": totals["loss"] / n, "aux_loss": totals["aux"] / n, "lr": s.lr(epoch * n + n - 1),
           "images": totals["images"], "seconds": totals["seconds"],
           "images_per_s": totals["images"] / totals["seconds"]}
    row.update({f"loss_exit{i + 1}": v / n for i, v in enumerate(totals["exit_loss"])})
    return row


# config.json's, not the log's
IDENTITY = ("model", "seed", "world_size", "device", "fingerprint", "data_fingerprint")


def summarise(s: Setup, state: TrainState, startup: float | None) -> dict:
    """Rank 0 writes the final weights (EMA when the recipe has it, tagged with the run's fingerprint) and the
    training log; returns the log with the run's identity (IDENTITY), which config.json stores."""
    summary = {}
    if is_main():
        timed = state.log[1:] or state.log  # the first epoch includes warm-up effects
        summary = {
            "model": s.record.model, "seed": s.record.seed, "world_size": s.world, "device": s.device.type,
            "fingerprint": s.fingerprint,
            "data_fingerprint": s.data["fingerprint"], "epochs": s.train.epochs, "steps_per_epoch": s.steps_per_epoch,
            "global_batch": s.train.global_batch, "per_process_batch": s.batching.per_process,
            "accumulation": s.batching.accumulation, "images_seen": s.total * s.train.global_batch,
            "train_images": s.data["counts"].get("train"), "seconds": sum(r["seconds"] for r in state.log),
            "seconds_per_epoch": float(np.mean([r["seconds"] for r in timed])),
            "images_per_s": float(np.mean([r["images_per_s"] for r in timed])),
            "startup_seconds": startup, "final_loss": state.log[-1]["loss"], "log": state.log, "curve": state.curve,
        }
        s.record.write_weights((s.ema.module if s.ema is not None else s.model).state_dict(), s.fingerprint)
        s.record.write_train_log({k: v for k, v in summary.items() if k not in IDENTITY})
    if s.world > 1:
        torch.distributed.barrier()
    return summary


def train_run(*, record: RunRecord, spec, train, prepared: str | Path, progress: bool = True,
              step_hook=None) -> dict:
    """Train one run (spec: specs.ModelSpec, train: run_configs.TrainConfig); rank 0 writes its weights and
    training log into the run folder of `record` and returns the log.

    `step_hook(step, loss) -> loss` is for tests (inject a NaN, stop the process at a step)."""
    s = set_up(record, spec, train, prepared)
    s.heartbeat.beat("setup", force=True, step=0, total=s.total)
    state = resume(s, progress)
    startup = process_age()
    try:
        while state.step < s.total:
            train_one_epoch(s, state, progress, step_hook)
    except BaseException:
        with contextlib.suppress(BaseException):  # a checkpoint being written is completed; the first error wins
            s.writer.wait()
        raise
    s.writer.wait()  # the last checkpoint is on disk (or its write's error raised) before anything else
    return summarise(s, state, startup)
