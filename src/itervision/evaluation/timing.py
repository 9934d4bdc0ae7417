"""Wall-clock inference per exit: latency at batch 1 and throughput at a large batch, after warm-up."""
from __future__ import annotations

import time

import torch

from itervision.evaluation.flops import run_to_exit


def _sync(x):
    if x.device.type == "cuda":
        torch.cuda.synchronize(x.device)


def _time(fn, x, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn(x)
    _sync(x)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn(x)
    _sync(x)
    return (time.perf_counter() - t0) / repeats


@torch.no_grad()
def time_exits(model, batch: int = 256, warmup: int = 1, repeats: int = 5, latency_repeats: int = 20) -> list[dict]:
    model.eval()
    cfg = model.cfg
    rows = []
    for e in range(model.num_exits):
        fn = lambda x, e=e: run_to_exit(model, x, e)  # noqa: E731
        big = torch.randn(batch, cfg.in_chans, cfg.img_size, cfg.img_size, device=next(model.parameters()).device)
        one = big[:1]
        seconds = _time(fn, big, warmup, repeats)
        latency = _time(fn, one, warmup, latency_repeats)
        rows.append({"exit": e + 1, "images_per_s": batch / seconds, "latency_ms": latency * 1e3, "batch": batch})
    return rows
