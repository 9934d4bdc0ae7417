"""torchrun support: process group set-up (NCCL on GPU, gloo on CPU) and a seeded repeated-augmentation sampler."""
from __future__ import annotations

import math
import os

import torch
import torch.distributed as dist


def init_distributed() -> tuple[int, int, torch.device]:
    """(rank, world_size, device). Initialises the process group when launched by torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
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


class RepeatedAugmentationSampler(torch.utils.data.Sampler):
    """Distributed sampler with repeated augmentation (DeiT): each image is drawn `repeats` times per epoch, the
    copies spread over ranks, and each rank takes ceil(n / world) draws an epoch.

    Written here rather than using timm's RepeatAugSampler because that one seeds the order with the epoch
    only and yields bare indices: we need the order to depend on the run seed (paired seeds), and each draw to
    carry its copy number so that `SeededDraws` gives every copy its own, reproducible augmentation.
    A draw is encoded as `index + copy * n`.
    """

    def __init__(self, n: int, num_replicas: int, rank: int, seed: int, repeats: int = 3):
        self.n, self.world, self.rank, self.seed, self.repeats = n, num_replicas, rank, seed, max(1, int(repeats))
        self.epoch = 0
        self.num_samples = math.ceil(n / num_replicas)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self):
        g = torch.Generator()
        g.manual_seed(self.seed * 1_000_003 + self.epoch)
        order = torch.randperm(self.n, generator=g)
        draws = order.repeat_interleave(self.repeats) + self.n * torch.arange(self.repeats).repeat(self.n)
        total = math.ceil(len(draws) / self.world) * self.world
        draws = torch.cat([draws, draws[: total - len(draws)]])  # pad by wrapping so ranks get equal shares
        return iter(draws[self.rank:total:self.world][: self.num_samples].tolist())
