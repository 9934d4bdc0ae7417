"""torchrun support: process group set-up (NCCL on GPU, gloo on CPU), rank helpers."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist


def launch_rank() -> tuple[int, int]:
    """(rank, world size) as the launcher set them (torchrun's RANK and WORLD_SIZE; 0, 1 without one): the one
    place they are read."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def init_distributed() -> tuple[int, int, torch.device]:
    """(rank, world_size, device). Initialises the process group when launched by torchrun."""
    rank, world = launch_rank()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return rank, world, device


def is_main() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def all_reduce_mean(value: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized():
        value = value.clone()
        dist.all_reduce(value)
        value /= dist.get_world_size()
    return value


def cleanup() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def all_gather_objects(obj) -> list:
    """[obj of rank 0, obj of rank 1, ...] (just [obj] without a process group)."""
    if not dist.is_initialized():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out
