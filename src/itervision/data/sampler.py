"""The order of training images: a seeded, distributed sampler with repeated augmentation."""
from __future__ import annotations

import math

import torch


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
