"""Schemas of a run's configuration beside its model's (models/configs.py): the training recipe, evaluation and
profiling keys. They are the params groups `train`, `evaluate` and `profile` (params.py) and the checked, typed
form of configs/resolved/DATASET/MODEL/{run,profile}.json (specs.py), so a file read back is checked exactly like
params.yaml. Standard library only: params.yaml is checked without importing torch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from itervision.schema import key

_RANDAUGMENT = re.compile(r"^rand(-(m\d+|n\d+|mstd\d+(\.\d+)?|mmax\d+|inc[01]|p\d*\.?\d+))*$")
COMPILE_MODES = ("none", "default", "reduce-overhead")
# The kernels' instruction set is part of a CPU run's recipe, like its thread count: ATen's vectorised kernels,
# oneDNN (convolutions) and MKL (matrix products) each pick code paths by the CPU they find, and two paths sum in
# different orders, so the same seed gives other weights on another CPU. Each of the three honours an environment
# variable read when the library first runs (checked for torch 2.14.1: docs/performance.md), so a run stage sets
# them before it imports torch. `native` pins nothing (the results then depend on the CPU).
CPU_PINS = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "MKL_CBWR": "AVX512"},
    "native": {},
}
# The CPU flags each pin needs (ATen's own test for its AVX2 / AVX512 kernels). Read from the hardware, never from
# torch: ATEN_CPU_CAPABILITY=avx512 makes torch *report* AVX512 on a CPU without it, and then die on the first
# AVX-512 instruction (SIGILL, measured on an AMD EPYC), so a pin is set only where the CPU has it.
CPU_FLAGS = {"avx2": ("avx2", "fma"), "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq", "fma")}


def cpu_flags() -> set | None:
    """The CPU's feature flags (Linux /proc/cpuinfo), None where they cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def cpu_has(capability: str) -> bool | None:
    """Whether this CPU runs the kernels of `capability` (None: unknown, flags unreadable)."""
    if capability == "native":
        return True
    flags = cpu_flags()
    return None if flags is None else all(f in flags for f in CPU_FLAGS[capability])


def best_capability() -> str:
    """The highest pin this CPU can run (native where none: ARM, or flags unreadable)."""
    return next((c for c in ("avx512", "avx2") if cpu_has(c)), "native")
# Keys that change how fast a run goes, never what it computes: out of the run fingerprint, so changing them
# resumes and reuses a run (loader processes: every image's augmentation is seeded by (seed, epoch, image) or by
# the batch, whatever process draws it; checkpoints: a resumed run replays the uninterrupted one exactly).
HARDWARE_KNOBS = ("workers", "checkpoint_minutes")
# Keys that are recipe only where the CPU computes the model: a GPU run records them but is not tied to them.
CPU_RECIPE = ("threads", "cpu_capability")
AUGMENT_ON = ("host", "device")


def _randaugment_ok(s: str) -> bool:
    return s == "" or bool(_RANDAUGMENT.match(s))


@dataclass(frozen=True, kw_only=True)
class Batching:
    """One process's share of an optimiser step (TrainConfig.batching)."""
    world: int
    per_process: int     # global_batch / world
    accumulation: int    # micro-batches per optimiser step
    micro: int           # images per micro-batch


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """The recipe of stage run, shared by every model of a study on a dataset.

    `global_batch` is the number of images per optimiser step over all processes: each of W processes takes
    global_batch / W of them (W must divide it), and the peak lr is `lr` x global_batch / lr_batch. So 1, 2 or 8
    GPUs train the same recipe; `micro_batch` splits a process's share into gradient-accumulation steps when it
    does not fit in memory (BatchNorm then normalises micro-batches: the recursive encoder's statistics change)."""
    epochs: int = key(1)
    steps_per_epoch: int | None = key(1, default=None, doc="cap on optimiser steps per epoch (null = the whole "
                                                           "training split)")
    global_batch: int = key(1, doc="images per optimiser step, over all processes")
    micro_batch: int | None = key(1, default=None, doc="most images per forward/backward in one process "
                                                       "(null = the process's whole share)")
    lr: float = key(0, open_lo=True, doc="peak lr at lr_batch images per step, scaled linearly with global_batch")
    lr_batch: int = key(1)
    min_lr: float = key(0)
    warmup_epochs: float = key(0)
    warmup_lr: float = key(0)
    weight_decay: float = key(0)
    randaugment: str = key(pattern=_randaugment_ok, hint="'' (off) or a timm string such as rand-m9-n2-mstd0.5")
    crop_scale: list[float] = key(0, 1, open_lo=True, pattern=lambda s: len(s) == 2 and s[0] <= s[1],
                                  hint="[low, high] with 0 < low <= high <= 1")
    crop_pad: int = key(0, doc="pad-and-crop translation in pixels (tensor data path)")
    hflip: float = key(0, 1)
    interpolation: str = key(choices=("bilinear", "bicubic"))
    mixup: float = key(0)
    cutmix: float = key(0)
    mix_prob: float = key(0, 1)
    label_smoothing: float = key(0, 1)
    random_erasing: float = key(0, 1)
    repeated_aug: int = key(1)
    clip_grad: float = key(0)
    amp: str = key(choices=("none", "bf16", "fp16"))
    compile: str = key(choices=COMPILE_MODES, default="none",
                       doc="torch.compile of the training step: none, default, or reduce-overhead (CUDA graphs)")
    ema: bool = key()
    ema_decay: float = key(0, 1, open_lo=True)
    augment_on: str = key(choices=AUGMENT_ON, default="host",
                          doc="where ImageNet images are decoded and augmented: host (timm's PIL transforms in loader "
                              "workers) or device (batched on the run's device, data/device_augment.py; differs from "
                              "timm as docs/data.md says, so it is part of the recipe)")
    workers: int = key(0, default=0, doc="loader processes (hardware knob: speed only, not in the run fingerprint)")
    checkpoint_minutes: float = key(0, default=0.0,
                                    doc="minutes between training checkpoints, written in the background (0: at every "
                                        "curve point and epoch end); hardware knob, not in the run fingerprint")
    threads: int = key(1, 512, doc="intra-op CPU threads of a run: part of the recipe (results depend on it)")
    cpu_capability: str = key(choices=tuple(CPU_PINS), default="native",
                              doc="instruction set the CPU kernels are pinned to: part of the recipe (results depend "
                                  "on it); a CPU without it is refused")
    curve_points: int = key(0, doc="learning-curve evaluations during training (the final one is separate)")
    curve_images: int = key(1, doc="images of the calib and of the test split scored at each curve point")

    def check(self):
        if self.micro_batch is not None and self.micro_batch > self.global_batch:
            raise ValueError(f"micro_batch {self.micro_batch} exceeds global_batch {self.global_batch}")

    def batching(self, world: int) -> Batching:
        """How each of `world` processes takes its share of a step, derived once per run (the engine, the loaders,
        the plan and the run's log all read this object): global_batch / world images a process, split into
        micro-batches of at most micro_batch. A world that does not divide the batch is a one-line error."""
        from itervision.errors import UserError

        if self.global_batch % world:
            raise UserError(f"train.global_batch {self.global_batch} is not divisible by the {world} processes of "
                            f"this run; launch a world size that divides it (or change train.global_batch)")
        per = self.global_batch // world
        if (self.mixup > 0 or self.cutmix > 0) and per % 2:
            raise UserError(f"train.global_batch {self.global_batch} over {world} processes gives {per} images a "
                            f"process, which mixup/CutMix cannot pair; make it even")
        micro = min(self.micro_batch or per, per)
        if per % micro:
            raise UserError(f"train.micro_batch {micro} does not divide the {per} images a process takes per step "
                            f"(global_batch {self.global_batch} over {world} processes); pick a divisor")
        return Batching(world=world, per_process=per, accumulation=per // micro, micro=micro)

    def fingerprinted(self, device_type: str) -> dict:
        """The recipe as the run fingerprint sees it: without the hardware knobs, and, for a run that computes on
        a GPU, without the CPU's threads and instruction set (recorded in config.json, not binding)."""
        from itervision.schema import as_dict

        drop = HARDWARE_KNOBS + (CPU_RECIPE if device_type != "cpu" else ())
        return {k: v for k, v in as_dict(self).items() if k not in drop}

    def cpu_pin_env(self) -> dict:
        """The environment that pins the CPU kernels to `cpu_capability` (set before torch is imported); nothing
        where the CPU lacks it (the run is then refused, or, on a GPU, noted: environment.check_cpu_pin)."""
        return dict(CPU_PINS[self.cpu_capability]) if cpu_has(self.cpu_capability) is not False else {}

    def peak_lr(self) -> float:
        return self.lr * self.global_batch / self.lr_batch


@dataclass(frozen=True, kw_only=True)
class EvaluateConfig:
    """Stage run (prediction at every exit after training)."""
    batch_size: int = key(1, doc="images per forward pass, per process")
    trace_images: int = key(1, doc="test images traced for the recursive tables (sparsity, experts, roles)")


@dataclass(frozen=True, kw_only=True)
class ProfileConfig:
    """Stage profile (per model, not per seed): FLOPs and wall-clock per exit."""
    timing_batch: int = key(1)
    timing_warmup: int = key(0)
    timing_repeats: int = key(1)
    latency_repeats: int = key(1)
