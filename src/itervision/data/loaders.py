"""Prepared splits (output of the subset stage) as torch datasets, with timm's train/eval transforms.

Split names seen by the engine: train, calib, test. For ImageNet subsets `test` is the evaluation set
(val + held-out train images), `calib` the calibration images held out from train.
"""
from __future__ import annotations

import csv
import random
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from itervision.data.datasets import IMAGENET_MEAN, IMAGENET_STD
from itervision.errors import UserError
from itervision.io import read_json

IMAGENET_SPLITS = {"train": ("train",), "calib": ("calib",), "test": ("val", "holdout")}


class ArraySplit(Dataset):
    """uint8 NHWC images + labels from one `.npz` of the subset stage."""

    def __init__(self, path: Path, transform=None):
        with np.load(path) as f:
            self.images, self.labels = f["images"], f["labels"]
        self.transform = transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        img = self.images[i]
        img = Image.fromarray(img[..., 0] if img.shape[-1] == 1 else img)
        return (self.transform(img) if self.transform else img), int(self.labels[i])


class ManifestImages(Dataset):
    """Images of an ImageNet subset listed in its manifest.csv, restricted to some splits."""

    def __init__(self, root: Path, splits: tuple, transform=None):
        self.root, self.transform = root, transform
        with open(root / "manifest.csv") as f:
            self.rows = [(r["path"], int(r["class_index"])) for r in csv.DictReader(f) if r["split"] in splits]
        self.labels = np.array([c for _, c in self.rows], dtype=np.int64)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        path, label = self.rows[i]
        try:
            with Image.open(self.root / path) as im:
                img = im.convert("RGB")
        except OSError as err:
            raise UserError(f"corrupt image {self.root / path} ({err}); re-run the subset stage") from None
        return (self.transform(img) if self.transform else img), label


class SeededDraws(Dataset):
    """Augmentation as a pure function of (epoch seed, image, copy): each draw `index + copy * n` (see
    RepeatedAugmentationSampler) runs the transform under generators seeded from those three numbers, then
    restores the caller's generators. Two variants with the same run seed therefore see identical augmented
    images, whatever randomness their forward pass consumes and however many loader workers run."""

    def __init__(self, base: Dataset):
        self.base, self.n, self.epoch_seed = base, len(base), 0

    def __len__(self):
        return self.n

    def __getitem__(self, code):
        index, copy = code % self.n, code // self.n
        seed = (self.epoch_seed * 2_654_435_761 + index * 40_503 + copy * 97) % (2 ** 31)
        py_state, np_state = random.getstate(), np.random.get_state()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            random.seed(seed)
            np.random.seed(seed)
            try:
                return self.base[index]
            finally:
                random.setstate(py_state)
                np.random.set_state(np_state)


def dataset_description(prepared: Path) -> dict:
    """classes, channels, mean, std of a prepared dataset (either layout)."""
    prepared = Path(prepared)
    if (prepared / "manifest.json").exists():
        m = read_json(prepared / "manifest.json")
        return {"classes": m["classes"], "channels": m["channels"], "mean": m["mean"], "std": m["std"],
                "kind": "arrays"}
    if (prepared / "summary.json").exists():
        s = read_json(prepared / "summary.json")
        return {"classes": s["classes"], "channels": 3, "mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD),
                "kind": "imagenet"}
    raise UserError(f"prepared dataset {prepared} not found; run `dvc repro` (the subset stage) first")


def open_split(prepared: str | Path, split: str, transform=None) -> Dataset:
    prepared = Path(prepared)
    desc = dataset_description(prepared)
    if desc["kind"] == "arrays":
        path = prepared / f"{split}.npz"
        if not path.exists():
            raise UserError(f"split file {path} missing; re-run the subset stage")
        return ArraySplit(path, transform)
    return ManifestImages(prepared, IMAGENET_SPLITS[split], transform)


def build_transform(train: bool, img_size: int, desc: dict, aug: dict | None = None):
    """timm's transform pipeline (RandomResizedCrop, flip, RandAugment, random erasing) or its eval resize."""
    from timm.data import create_transform

    aug = aug or {}
    kwargs = dict(input_size=(desc["channels"], img_size, img_size), mean=tuple(desc["mean"]),
                  std=tuple(desc["std"]), interpolation=aug.get("interpolation", "bicubic"))
    if not train:
        # arrays are stored at their native size: resize only, no centre crop of the small images
        return create_transform(**kwargs, is_training=False,
                                crop_pct=1.0 if desc["kind"] == "arrays" else aug.get("crop_pct", 0.875))
    auto = aug.get("randaugment") or None
    return create_transform(**kwargs, is_training=True, scale=tuple(aug.get("crop_scale", (0.08, 1.0))),
                            hflip=aug.get("hflip", 0.5), auto_augment=auto, re_prob=aug.get("random_erasing", 0.0),
                            re_mode="pixel", re_count=1)


def eval_tensor_batches(dataset: Dataset, batch_size: int):
    """Yield (images, labels) batches of a transformed dataset in order."""
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=0)
    yield from loader
