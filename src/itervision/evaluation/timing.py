"""Wall-clock inference per exit: latency at batch 1 and throughput at a large batch, after warm-up.

Each exit runs only what it needs (stem/encoder and the first rounds or steps). Every repeat is timed on its
own; the median is reported with the fastest and slowest beside it, since this machine's neighbours make
single timings noisy.
"""
from __future__ import annotations

import statistics
import time

import torch

from itervision.evaluation.flops import run_to_exit


def _sync(x):
    if x.device.type == "cuda":
        torch.cuda.synchronize(x.device)


def timed_calls(fn, x, warmup: int, repeats: int) -> list[float]:
    """Seconds of each of `repeats` calls fn(x) after `warmup` untimed ones (the device synchronised around each)."""
    for _ in range(warmup):
        fn(x)
    _sync(x)
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(x)
        _sync(x)
        out.append(time.perf_counter() - t0)
    return out


@torch.inference_mode()
def time_exits(model, batch: int, warmup: int, repeats: int, latency_repeats: int) -> list[dict]:
    model.eval()
    cfg = model.cfg
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(0)
    big = torch.randn(batch, cfg.in_chans, cfg.img_size, cfg.img_size, generator=gen).to(device)
    rows = []
    for e in range(model.num_exits):
        def fn(x, e=e):
            return run_to_exit(model, x, e)
        through = timed_calls(fn, big, warmup, repeats)
        latency = timed_calls(fn, big[:1], warmup, latency_repeats)
        rows.append({"exit": e + 1, "batch": batch,
                     "images_per_s": batch / statistics.median(through),
                     "latency_ms": 1e3 * statistics.median(latency),
                     "latency_ms_min": 1e3 * min(latency), "latency_ms_max": 1e3 * max(latency)})
    return rows
