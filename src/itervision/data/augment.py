"""Batched augmentation of in-memory uint8 images (the tensor data path of array datasets).

One call turns a batch of uint8 NHWC images into a normalised float NCHW batch at the model's resolution:

    random-resized crop, pad-and-crop translation, horizontal flip   -> one affine grid + one grid_sample
    normalise (mean, std)
    random erasing (timm's 'pixel' mode: per-pixel normal noise)     -> one mask for the whole batch

Every random number comes from the `torch.Generator` the caller passes, so a batch is a pure function of
that generator's seed (the engine seeds it from (run seed, epoch, batch, rank)): two variants with the same
run seed see identical batches, and a resumed run replays them exactly.

Written here rather than with timm/torchvision transforms because those draw parameters and transform one
image at a time, from the global random state, in Python: on 28-32 px images that per-image work costs more
than the model (447 img/s in the pipeline against about 1,000 for the model alone, measured). The
distributions follow timm's: crop area uniform in `crop_scale`, log aspect ratio uniform in log(3/4, 4/3);
erasing area uniform in [0.02, 1/3] of the image, log aspect uniform in log(0.3, 1/0.3). Where torchvision
retries a crop that does not fit up to 10 times before falling back to the whole image, the crop falls back
at once (so crop_scale [1, 1] is no crop at all); an erasing box that does not fit is clipped to the image.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

LOG_RATIO = (math.log(3 / 4), math.log(4 / 3))
ERASE_AREA = (0.02, 1 / 3)
ERASE_LOG_ASPECT = (math.log(0.3), math.log(1 / 0.3))


@dataclass(frozen=True)
class BatchAugment:
    img_size: int
    mean: tuple
    std: tuple
    crop_scale: tuple = (1.0, 1.0)
    crop_pad: int = 0
    hflip: float = 0.0
    random_erasing: float = 0.0
    interpolation: str = "bilinear"

    @classmethod
    def from_train(cls, train, img_size: int, mean, std) -> "BatchAugment":
        """From the train recipe (run_configs.TrainConfig)."""
        return cls(img_size, tuple(mean), tuple(std), tuple(train.crop_scale), train.crop_pad, train.hflip,
                   train.random_erasing, train.interpolation)


def _uniform(gen, n, lo, hi):
    return torch.rand(n, generator=gen) * (hi - lo) + lo


def to_float(images: torch.Tensor) -> torch.Tensor:
    """uint8 (B, H, W, C) -> float (B, C, H, W) in [0, 1]."""
    return images.permute(0, 3, 1, 2).float().div_(255)


def normalise(x: torch.Tensor, mean, std) -> torch.Tensor:
    m = torch.tensor(mean, dtype=x.dtype).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=x.dtype).view(1, -1, 1, 1)
    return (x - m) / s


def crop_flip_theta(gen: torch.Generator, n: int, h: int, w: int, aug: BatchAugment) -> torch.Tensor:
    """(n, 2, 3) affine maps from output to input coordinates ([-1, 1], align_corners=False)."""
    lo, hi = aug.crop_scale
    area = _uniform(gen, n, lo, hi)
    ratio = torch.exp(_uniform(gen, n, *LOG_RATIO))
    cw, ch = torch.sqrt(area * ratio), torch.sqrt(area / ratio)  # crop size as fractions of the image
    fits = (cw <= 1) & (ch <= 1)  # a crop that does not fit becomes the whole image (torchvision's fallback)
    cw, ch = torch.where(fits, cw, torch.ones_like(cw)), torch.where(fits, ch, torch.ones_like(ch))
    cx = (torch.rand(n, generator=gen) * 2 - 1) * (1 - cw)  # crop centre, keeping the crop inside the image
    cy = (torch.rand(n, generator=gen) * 2 - 1) * (1 - ch)
    if aug.crop_pad:  # pad-and-crop: an integer shift of up to crop_pad pixels, zeros outside
        p = aug.crop_pad
        cx = cx + torch.randint(-p, p + 1, (n,), generator=gen) * 2.0 / w
        cy = cy + torch.randint(-p, p + 1, (n,), generator=gen) * 2.0 / h
    flip = torch.where(torch.rand(n, generator=gen) < aug.hflip, -1.0, 1.0)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0], theta[:, 0, 2] = cw * flip, cx
    theta[:, 1, 1], theta[:, 1, 2] = ch, cy
    return theta


def erase(x: torch.Tensor, gen: torch.Generator, probability: float) -> torch.Tensor:
    """Random erasing of one box per chosen image, filled with per-pixel standard normal noise."""
    if probability <= 0:
        return x
    B, C, H, W = x.shape
    chosen = torch.rand(B, generator=gen) < probability
    area = _uniform(gen, B, *ERASE_AREA) * H * W
    aspect = torch.exp(_uniform(gen, B, *ERASE_LOG_ASPECT))
    eh = torch.sqrt(area * aspect).round().clamp(1, H)
    ew = torch.sqrt(area / aspect).round().clamp(1, W)
    top = (torch.rand(B, generator=gen) * (H - eh + 1)).floor()
    left = (torch.rand(B, generator=gen) * (W - ew + 1)).floor()
    rows = torch.arange(H).view(1, H, 1)
    cols = torch.arange(W).view(1, 1, W)
    box = ((rows >= top.view(B, 1, 1)) & (rows < (top + eh).view(B, 1, 1))
           & (cols >= left.view(B, 1, 1)) & (cols < (left + ew).view(B, 1, 1)) & chosen.view(B, 1, 1))
    noise = torch.randn(x.shape, generator=gen, dtype=x.dtype)
    return torch.where(box.unsqueeze(1), noise, x)


def augment(images: torch.Tensor, gen: torch.Generator, aug: BatchAugment) -> torch.Tensor:
    """uint8 (B, H, W, C) -> augmented, normalised float (B, C, S, S)."""
    x = to_float(images)
    B, _, H, W = x.shape
    theta = crop_flip_theta(gen, B, H, W, aug)
    grid = F.affine_grid(theta, [B, x.shape[1], aug.img_size, aug.img_size], align_corners=False)
    x = F.grid_sample(x, grid, mode=aug.interpolation, padding_mode="zeros", align_corners=False)
    return erase(normalise(x, aug.mean, aug.std), gen, aug.random_erasing)


def resize_eval(images: torch.Tensor, img_size: int, mean, std, interpolation: str = "bilinear") -> torch.Tensor:
    """uint8 (B, H, W, C) -> normalised float (B, C, S, S), resized without cropping: what `augment` gives
    with no crop, shift, flip or erasing."""
    x = to_float(images)
    if x.shape[-1] != img_size or x.shape[-2] != img_size:
        x = F.interpolate(x, size=(img_size, img_size), mode=interpolation, align_corners=False)
    return normalise(x, mean, std)
