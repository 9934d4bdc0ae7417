"""Prepared splits (output of the subset stage) as training and evaluation batches.

Data paths, one interface (`train_batches(...).epoch(e, start)` yields (batch index, images, labels)):
* array datasets (Fashion-MNIST, MNIST, CIFAR): each split is one uint8 tensor in memory and augmentation runs
  on whole batches as tensor ops (data/augment.py), in the training process, with no loader workers; with a
  RandAugment policy, timm's PIL RandAugment per image (`train.augment_on: host`) or the batched device version
  (`device`: data/device_augment.py, the whole recipe on the run's device);
* ImageNet shards (data/shards.py): `host`: timm's PIL transforms (RandomResizedCrop, flip, RandAugment, random
  erasing) in DataLoader workers, one image at a time; `device`: the workers only read JPEG bytes, which are
  decoded (nvJPEG, batched, on a GPU) and augmented on the device by batch.
In all, the images of batch b of epoch e are a pure function of (run seed, e, b, rank): the order comes from
the seeded repeated-augmentation sampler, and the augmentation from generators seeded by the batch (tensor and
device paths) or by (epoch, image, copy) (host path on shards), whatever the number of loader workers. A killed
run resumes at a batch and replays the same images.

Split names seen by the engine: train, calib, test. For ImageNet subsets `test` is the evaluation set
(val + held-out train images), `calib` the calibration images held out from train.
"""
from __future__ import annotations

import contextlib
import hashlib
import random
import zipfile
from pathlib import Path

import numpy as np
import torch

from itervision.data.augment import BatchAugment, augment, resize_eval
from itervision.data.device_augment import DeviceAugment, decode_jpegs
from itervision.data.shards import ShardIndex
from itervision.data.registry import IMAGENET_MEAN, IMAGENET_STD
from itervision.data.sampler import RepeatedAugmentationSampler
from itervision.errors import UserError
from itervision.io import read_json_file

IMAGENET_SPLITS = {"train": ("train",), "calib": ("calib",), "test": ("val", "holdout")}


def _regenerate(prepared: Path) -> str:
    return f"regenerate it with `dvc repro --force make_subset@{Path(prepared).name}`"


def describe_prepared(prepared: str | Path) -> dict:
    """classes, channels, mean, std, kind and a content fingerprint of a prepared dataset (either layout)."""
    prepared = Path(prepared)
    if (prepared / "manifest.json").exists():
        m = read_json_file(prepared / "manifest.json", _regenerate(prepared), required=("classes", "channels",
                                                                                       "mean", "std", "splits"))
        blob = (prepared / "manifest.json").read_bytes()
        return {"classes": m["classes"], "channels": m["channels"], "mean": m["mean"], "std": m["std"],
                "kind": "arrays", "fingerprint": hashlib.sha256(blob).hexdigest()[:16],
                "counts": {s: v["count"] for s, v in m["splits"].items()}}
    if (prepared / "summary.json").exists():
        s = read_json_file(prepared / "summary.json", _regenerate(prepared), required=("classes", "totals"))
        digest = hashlib.sha256((prepared / "summary.json").read_bytes())  # every shard's sha1
        if not (prepared / "index.csv").exists():
            raise UserError(f"{prepared / 'index.csv'} is missing; {_regenerate(prepared)}")
        digest.update((prepared / "index.csv").read_bytes())  # every image's shard, offset and size
        return {"classes": s["classes"], "channels": 3, "mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD),
                "kind": "imagenet", "fingerprint": digest.hexdigest()[:16], "counts": s["totals"]}
    raise UserError(f"prepared dataset {prepared} not found; run `dvc repro make_subset@{prepared.name}` first")


def load_arrays(prepared: str | Path, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(uint8 NHWC images, int64 labels) of one split, checked against the checksum in manifest.json."""
    prepared = Path(prepared)
    path = prepared / f"{split}.npz"
    if not path.exists():
        raise UserError(f"split file {path} is missing; {_regenerate(prepared)}")
    try:
        with np.load(path) as f:
            images, labels = f["images"], f["labels"]
    except (zipfile.BadZipFile, ValueError, KeyError, EOFError, OSError) as err:
        raise UserError(f"split file {path} is unreadable ({type(err).__name__}); {_regenerate(prepared)}") from None
    manifest = read_json_file(prepared / "manifest.json", _regenerate(prepared))
    expected = (manifest.get("splits") or {}).get(split, {}).get("sha1")
    if expected and hashlib.sha1(images.tobytes() + labels.tobytes()).hexdigest() != expected:
        raise UserError(f"split file {path} does not match the checksum in manifest.json; {_regenerate(prepared)}")
    return torch.from_numpy(np.ascontiguousarray(images)), torch.from_numpy(labels.astype(np.int64))


def batch_seed(seed: int, epoch: int, batch: int, rank: int = 0) -> int:
    return ((((seed * 1_000_003 + epoch) * 100_003 + batch) * 1009 + rank) * 2_654_435_761) % (2 ** 63 - 1)


@contextlib.contextmanager
def global_seed(seed: int):
    """Seed Python's and NumPy's global generators (timm's RandAugment and Mixup draw from them) for one
    block, then restore them."""
    py, npy = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    try:
        yield
    finally:
        random.setstate(py)
        np.random.set_state(npy)


class TensorBatches:
    """Training batches of an array dataset: uint8 tensors in memory, batched augmentation (on the host, or with
    `device_aug` the whole recipe on the run's device)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, aug: BatchAugment, *, batch_size: int, seed: int,
                 rank: int = 0, world: int = 1, repeats: int = 1, max_steps: int | None = None,
                 randaugment: str = "", device_aug: DeviceAugment | None = None):
        self.images, self.labels, self.aug, self.device_aug = images, labels, aug, device_aug
        self.batch_size, self.seed, self.rank = batch_size, seed, rank
        self.sampler = RepeatedAugmentationSampler(len(labels), world, rank, seed, repeats)
        steps = len(self.sampler) // batch_size
        self.steps = min(steps, max_steps) if max_steps else steps
        self.randaugment = _rand_augment(randaugment, aug.mean) if randaugment and device_aug is None else None

    def __len__(self) -> int:
        return self.steps

    def epoch(self, epoch: int, start: int = 0):
        self.sampler.set_epoch(epoch)
        draws = torch.tensor(list(self.sampler), dtype=torch.long) % len(self.labels)  # copies share the image
        for b in range(start, self.steps):
            idx = draws[b * self.batch_size:(b + 1) * self.batch_size]
            if self.device_aug is not None:
                images = self.images[idx].permute(0, 3, 1, 2).to(self.device_aug.device, non_blocking=True)
                yield b, self.device_aug(list(images), batch_seed(self.seed, epoch, b, self.rank)), self.labels[idx]
                continue
            gen = torch.Generator().manual_seed(batch_seed(self.seed, epoch, b, self.rank))
            images = self.images[idx]
            if self.randaugment is not None:
                images = _apply_pil(images, self.randaugment, batch_seed(self.seed, epoch, b, self.rank) + 1)
            yield b, augment(images, gen, self.aug), self.labels[idx]


def _rand_augment(spec: str, mean) -> object:
    """timm's RandAugment for images of the dataset's channel count (fill colour: the dataset mean, one value
    per channel; an RGB fill on a grayscale image makes PIL raise)."""
    from timm.data.auto_augment import rand_augment_transform  # timm's import (4 s) is paid only when used

    return rand_augment_transform(spec, {"translate_const": 10,
                                         "img_mean": tuple(min(255, round(255 * m)) for m in mean)})


def _apply_pil(images: torch.Tensor, transform, seed: int) -> torch.Tensor:
    """A PIL transform (RandAugment) applied to each uint8 image of a batch, seeded by the batch."""
    from PIL import Image

    out = []
    with global_seed(seed):
        for img in images.numpy():
            pil = Image.fromarray(img[..., 0] if img.shape[-1] == 1 else img)
            arr = np.asarray(transform(pil))
            out.append(arr[..., None] if arr.ndim == 2 else arr)
    return torch.from_numpy(np.stack(out))


class ShardImages(torch.utils.data.Dataset):
    """Images of some splits of a sharded ImageNet subset, decoded with PIL (host path, evaluation)."""

    def __init__(self, root: Path, splits: tuple, transform=None):
        self.root, self.transform = root, transform
        self.index = ShardIndex(root, splits)
        self.labels = self.index.labels

    def __len__(self):
        return len(self.index)

    def __getitem__(self, i):
        import io

        from PIL import Image

        try:
            with Image.open(io.BytesIO(self.index.read(i))) as im:
                img = im.convert("RGB")
        except OSError as err:
            raise UserError(f"corrupt image {self.index.keys[i]} in {self.root} ({err}); {_regenerate(self.root)}") \
                from None
        return (self.transform(img) if self.transform else img), int(self.labels[i])


class ShardBytes(torch.utils.data.Dataset):
    """The JPEG bytes of the train images of a sharded subset (device path): a loader process reads, the device
    decodes; on a CPU device the loader processes decode too (no GPU to do it)."""

    def __init__(self, root: Path, splits: tuple, decode: bool):
        self.index, self.decode = ShardIndex(root, splits), decode
        self.labels = self.index.labels

    def __len__(self):
        return len(self.index)

    def __getitem__(self, i):
        data = torch.frombuffer(bytearray(self.index.read(i)), dtype=torch.uint8)
        if self.decode:
            data = decode_jpegs([data], torch.device("cpu"))[0]
        return data, int(self.labels[i])


def _as_list(batch):
    return [x for x, _ in batch], torch.tensor([y for _, y in batch])


class SeededDraws(torch.utils.data.Dataset):
    """Augmentation as a pure function of (epoch seed, image, copy): draw `index + copy * n` (see
    RepeatedAugmentationSampler) runs the transform under generators seeded from those three numbers, then
    restores the caller's generators, whatever the number of loader workers."""

    def __init__(self, base):
        self.base, self.n, self.epoch_seed = base, len(base), 0

    def __len__(self):
        return self.n

    def __getitem__(self, code):
        index, copy = code % self.n, code // self.n
        seed = (self.epoch_seed * 2_654_435_761 + index * 40_503 + copy * 97) % (2 ** 31)
        with torch.random.fork_rng(devices=[]), global_seed(seed):
            torch.manual_seed(seed)
            return self.base[index]


class ShardBatches:
    """Training batches of a sharded ImageNet subset: timm's transforms in loader workers (host), or JPEG bytes
    from the workers decoded and augmented by batch on the device (device_aug)."""

    def __init__(self, prepared: Path, transform, *, batch_size: int, seed: int, rank: int = 0, world: int = 1,
                 repeats: int = 1, max_steps: int | None = None, workers: int = 0, pin_memory: bool = False,
                 device_aug: DeviceAugment | None = None):
        self.device_aug = device_aug
        if device_aug is None:
            self.data = SeededDraws(ShardImages(prepared, IMAGENET_SPLITS["train"], transform))
        else:
            self.data = ShardBytes(prepared, IMAGENET_SPLITS["train"], decode=device_aug.device.type != "cuda")
        self.sampler = RepeatedAugmentationSampler(len(self.data), world, rank, seed, repeats)
        self.seed, self.rank, self.batch_size, self.workers, self.pin = seed, rank, batch_size, workers, pin_memory
        steps = len(self.sampler) // batch_size
        self.steps = min(steps, max_steps) if max_steps else steps

    def __len__(self) -> int:
        return self.steps

    def epoch(self, epoch: int, start: int = 0):
        self.sampler.set_epoch(epoch)
        draws = list(self.sampler)[start * self.batch_size:self.steps * self.batch_size]
        if self.device_aug is None:
            self.data.epoch_seed = (self.seed * 1_000_003 + epoch) % (2 ** 31)
            loader = torch.utils.data.DataLoader(self.data, batch_size=self.batch_size, sampler=draws, drop_last=True,
                                                 num_workers=self.workers, pin_memory=self.pin)
            for b, (img, target) in enumerate(loader, start):
                yield b, img, target
            return
        n = len(self.data)
        loader = torch.utils.data.DataLoader(self.data, batch_size=self.batch_size, sampler=[d % n for d in draws],
                                             drop_last=True, num_workers=self.workers, collate_fn=_as_list,
                                             prefetch_factor=4 if self.workers else None)
        device = self.device_aug.device
        for b, (items, target) in enumerate(loader, start):
            images = decode_jpegs([x.to(device, non_blocking=True) for x in items], device) \
                if device.type == "cuda" else items
            yield b, self.device_aug(images, batch_seed(self.seed, epoch, b, self.rank)), target


def timm_transform(train: bool, img_size: int, desc: dict, recipe=None, interpolation: str = "bicubic"):
    """timm's transform pipeline for ImageNet folders: RandomResizedCrop, flip, RandAugment, random erasing (from
    the train recipe, run_configs.TrainConfig); or its evaluation resize and centre crop."""
    from timm.data import create_transform

    kwargs = dict(input_size=(desc["channels"], img_size, img_size), mean=tuple(desc["mean"]),
                  std=tuple(desc["std"]), interpolation=recipe.interpolation if recipe else interpolation)
    if not train:
        return create_transform(**kwargs, is_training=False, crop_pct=0.875)
    return create_transform(**kwargs, is_training=True, scale=tuple(recipe.crop_scale), hflip=recipe.hflip,
                            auto_augment=recipe.randaugment or None, re_prob=recipe.random_erasing,
                            re_mode="pixel", re_count=1)


def train_batches(prepared: str | Path, img_size: int, train, batching, *, seed: int, rank: int = 0,
                  device: torch.device | str = "cpu"):
    """A run's training batches: each process's share of the global batch (train: run_configs.TrainConfig,
    batching: its Batching for this run's world size), augmented where train.augment_on says."""
    prepared, device = Path(prepared), torch.device(device)
    desc = describe_prepared(prepared)
    common = dict(batch_size=batching.per_process, seed=seed, rank=rank, world=batching.world,
                  repeats=train.repeated_aug, max_steps=train.steps_per_epoch)
    device_aug = DeviceAugment.from_train(train, img_size, desc["mean"], desc["std"], device) \
        if train.augment_on == "device" else None
    if desc["kind"] == "arrays":
        images, labels = load_arrays(prepared, "train")
        aug = BatchAugment.from_train(train, img_size, desc["mean"], desc["std"])
        return TensorBatches(images, labels, aug, randaugment=train.randaugment, device_aug=device_aug, **common)
    return ShardBatches(prepared, timm_transform(True, img_size, desc, train), workers=train.workers,
                        pin_memory=device.type == "cuda", device_aug=device_aug, **common)


def eval_batches(prepared: str | Path, split: str, img_size: int, batch_size: int, *, limit: int | None = None,
                 interpolation: str = "bilinear", workers: int = 0):
    """(images, labels) batches of a split in order, without augmentation; the first `limit` images only."""
    prepared = Path(prepared)
    desc = describe_prepared(prepared)
    if desc["kind"] == "arrays":
        images, labels = load_arrays(prepared, split)
        n = len(labels) if limit is None else min(limit, len(labels))
        for i in range(0, n, batch_size):
            j = min(i + batch_size, n)
            yield resize_eval(images[i:j], img_size, desc["mean"], desc["std"], interpolation), labels[i:j]
        return
    data = ShardImages(prepared, IMAGENET_SPLITS[split], timm_transform(False, img_size, desc,
                                                                        interpolation=interpolation))
    if limit is not None:
        data = torch.utils.data.Subset(data, range(min(limit, len(data))))
    yield from torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=False, num_workers=workers)
