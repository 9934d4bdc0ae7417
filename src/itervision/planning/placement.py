"""Where each paper-scale run goes: the number of GPUs (world) that trains the recipe's global batch for the fewest
GPU-hours, from the measured rate at each per-GPU batch and the measured peak memory against the GPU's, then runs
packed side by side on the GPUs that remain (`make paper-plan`, docs/campaign.md).

A per-GPU rate rises with the per-GPU batch (an H200 trains sa-mlp at 1,134 images/s at 128 and 9,311 at 1,024),
so one GPU holding the whole global batch usually costs a fraction of the GPU-hours of eight GPUs holding an
eighth each. Per-process batch = global batch / world stays the rule, so every placement trains the published
recipe (the same optimiser steps, learning rate and images); world is part of the run fingerprint because
BatchNorm statistics (the recursive encoder) and the ranks' augmentation streams change with it.

Every rate and memory figure says where it came from: measured (at that batch), interpolated (between two
measured batches, linear in log batch), or extrapolated (beyond the measured batches: the largest batch's rate,
which rates that rise with batch make conservative; memory linear through the measured points). Only measured and
interpolated rates count toward a target.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

WORLDS = (1, 2, 4, 8)
MEMORY_FRACTION = 0.9        # of the GPU's memory a run may plan to use (allocator fragmentation, CUDA context)
GPU_MEMORY_GIB = {"nvidia-h200": 139.8, "nvidia-h100": 79.1}
COUNTED = ("measured", "interpolated", "compiled", "compiled~")  # compiled~: eager x the same model's measured
#                                                                  compile speed-up on another dataset


def counted(o) -> bool:
    return o.rate_basis in COUNTED


@dataclass
class Option:
    world: int
    batch: int                  # per GPU
    images_per_s: float | None  # per GPU
    rate_basis: str             # measured | interpolated | extrapolated | none
    peak_gib: float | None
    memory_basis: str
    fits: bool
    gpu_hours: float | None     # of one run (every GPU of it, compile included)
    input_bound: bool = False   # images_per_s is the input path's, below the GPU's (plan.input_cap)

    @property
    def hours(self) -> float | None:
        """Wall-clock hours of one run."""
        return None if self.gpu_hours is None else self.gpu_hours / self.world


def _points(table: dict | None) -> list[tuple[int, float]]:
    return sorted((int(b), float(v)) for b, v in (table or {}).items() if v is not None and math.isfinite(float(v)))


def log_interpolate(points: list[tuple[int, float]], batch: int) -> float | None:
    """The value at `batch` between two measured (batch, value) points, linear in log batch; None outside them."""
    for (b0, v0), (b1, v1) in zip(points, points[1:]):
        if b0 <= batch <= b1:
            return v0 + (math.log(batch) - math.log(b0)) / (math.log(b1) - math.log(b0)) * (v1 - v0)
    return None


def rate(entry: dict, batch: int) -> tuple[float | None, str]:
    """(per-GPU training images/s at `batch`, its basis) from a benchmark entry."""
    pts = _points(entry.get("train_images_per_s"))
    if not pts:
        return None, "none"
    for b, v in pts:
        if b == batch:
            return v, "measured"
    between = log_interpolate(pts, batch)
    if between is not None:
        return between, "interpolated"
    if batch > pts[-1][0]:
        return pts[-1][1], "extrapolated"
    return pts[0][1] * batch / pts[0][0], "extrapolated"  # below the smallest: proportional, pessimistic


def peak(entry: dict, batch: int) -> tuple[float | None, str]:
    """(peak GiB at `batch`, its basis): measured, or linear through the measured points (one point: through
    the origin, which overestimates a fixed part: conservative)."""
    pts = _points(entry.get("peak_gib"))
    if not pts:
        return None, "none"
    for b, v in pts:
        if b == batch:
            return v, "measured"
    if len(pts) == 1:
        return pts[0][1] * batch / pts[0][0], "extrapolated"
    if batch < pts[0][0]:
        (b0, v0), (b1, v1) = pts[0], pts[1]
    elif batch > pts[-1][0]:
        (b0, v0), (b1, v1) = pts[-2], pts[-1]
    else:
        (b0, v0), (b1, v1) = next((p, q) for p, q in zip(pts, pts[1:]) if p[0] < batch < q[0])
    value = v0 + (v1 - v0) * (batch - b0) / (b1 - b0)
    return value, "interpolated" if b0 < batch < b1 else "extrapolated"


def options(entry: dict | None, global_batch: int, images: int, gpu_memory_gib: float,
            compile_seconds: float = 0.0) -> list[Option]:
    """Every world of WORLDS that divides the global batch, with its per-GPU batch, rate, memory and GPU-hours
    for one run of `images` training images."""
    out = []
    for world in WORLDS:
        if global_batch % world:
            continue
        batch = global_batch // world
        r, rb = rate(entry or {}, batch)
        m, mb = peak(entry or {}, batch)
        fits = m is None or m <= MEMORY_FRACTION * gpu_memory_gib
        hours = None if r is None else world * (images / (world * r) + compile_seconds) / 3600
        out.append(Option(world, batch, r, rb, m, mb, fits, hours))
    return out


def choose(opts: list[Option]) -> Option | None:
    """The option of fewest GPU-hours among those that fit, preferring counted rates (measured, interpolated) to
    extrapolated ones at equal standing; None when none has a rate and fits."""
    usable = [o for o in opts if o.fits and o.gpu_hours is not None]
    if not usable:
        return None
    known = [o for o in usable if counted(o)]
    cheapest = min(usable, key=lambda o: (o.gpu_hours, o.world))
    if counted(cheapest) or not known:
        return cheapest
    return min(known, key=lambda o: (o.gpu_hours, o.world))


def makespan(jobs: list[tuple[int, float]], gpus: int) -> float:
    """Hours until the last job ends when jobs (world, wall hours) are list-scheduled longest first, each on the
    `world` GPUs that come free earliest (a gang: it starts when all of them are free)."""
    free = [0.0] * gpus
    end = 0.0
    for world, hours in sorted(jobs, key=lambda j: (-j[1], -j[0])):
        if world > gpus:
            return math.inf
        chosen = heapq.nsmallest(world, range(gpus), key=lambda g: free[g])
        start = max(free[g] for g in chosen)
        for g in chosen:
            free[g] = start + hours
        end = max(end, start + hours)
    return end


def meet_deadline(placed: dict, all_options: dict, runs: dict, gpus: int, hours: float) -> tuple[dict, bool]:
    """Widen placements (more GPUs per run, fewer hours each) while the campaign's makespan on `gpus` GPUs exceeds
    `hours`: each round tries the configurations in order of their runs' wall time, longest first, and keeps the
    first widening that shortens the makespan. Trades GPU-hours for wall-clock time. Returns (placement, whether
    the deadline is met); keys are configurations, runs their run counts."""
    placed = dict(placed)

    def span(pl):
        return makespan([(pl[k].world, pl[k].hours) for k in pl for _ in range(runs[k])], gpus)

    current = span(placed)
    while current > hours:
        for key in sorted(placed, key=lambda k: -placed[k].hours):
            wider = [o for o in all_options[key] if placed[key].world < o.world <= gpus and o.fits
                     and o.gpu_hours is not None]
            if not wider:
                continue
            trial = {**placed, key: min(wider, key=lambda o: o.world)}
            if span(trial) < current:
                placed, current = trial, span(trial)
                break
        else:
            return placed, False
    return placed, True


def write_placement(path, placement: dict[str, int], note: str) -> None:
    """Set `run.placement` of a params or scale file to `placement` ({"dataset/model": processes}), as a block of
    the `run:` group (the other lines, comments included, unchanged), written atomically; the result is read back
    and must hold exactly this mapping."""
    from pathlib import Path

    import yaml

    from itervision.errors import UserError
    from itervision.io import write_text

    path = Path(path)
    lines = path.read_text().splitlines()
    start = next((i for i, x in enumerate(lines) if x.split("#")[0].rstrip() == "run:"), None)
    if start is None:
        raise UserError(f"{path} has no `run:` group to hold the placement; add `run:` with its launcher")
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith((" ", "#"))),
               len(lines))
    group = lines[start + 1:end]
    keep, skipping = [], False
    for line in group:  # drop the old placement block: its key line and the lines indented under it
        if line.startswith("  placement:"):
            skipping = True
            continue
        if skipping and (line.startswith("    ") or not line.strip()):
            continue
        skipping = False
        keep.append(line)
    while keep and not keep[-1].strip():
        keep.pop()
    block = [f"  placement:                   # {note}"] + [f"    {k}: {v}" for k, v in sorted(placement.items())]
    if not placement:
        block = [f"  placement: {{}}               # {note}"]
    text = "\n".join(lines[:start + 1] + keep + block + ([""] if end < len(lines) else []) + lines[end:]) + "\n"
    got = (yaml.safe_load(text).get("run") or {}).get("placement")
    if got != placement:
        raise UserError(f"could not write run.placement into {path} (read back {got!r}); edit it by hand")
    write_text(path, text)
