"""Dataset facts in one place: what a dataset is, without reading it (classes, channels, size, normalisation)."""
from __future__ import annotations

from dataclasses import dataclass

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class DatasetFacts:
    name: str
    source: str            # "torchvision" (array files: idx, CIFAR pickles) or "imagenet" (a folder layout)
    num_classes: int
    channels: int
    native_size: int | None  # stored resolution of array datasets; ImageNet subsets keep their own sizes
    mean: tuple
    std: tuple
    torchvision_class: str | None = None  # torchvision.datasets class that reads the source files
    root_key: str = ""      # data.roots.<root_key> points at its source files
    train_images: int = 0   # training images of the full source (ImageNet-100: the CMC subset; ImageNet-200:
    #                         200 classes at ImageNet-1K's 1,281,167 / 1,000 per class), for cost plans


DATASETS = {
    "mnist": DatasetFacts("mnist", "torchvision", 10, 1, 28, (0.1307,), (0.3081,), "MNIST", "mnist", 60_000),
    "fashion_mnist": DatasetFacts("fashion_mnist", "torchvision", 10, 1, 28, (0.2860,), (0.3530,), "FashionMNIST",
                                  "fashion_mnist", 60_000),
    "cifar10": DatasetFacts("cifar10", "torchvision", 10, 3, 32, (0.4914, 0.4822, 0.4465),
                            (0.2470, 0.2435, 0.2616), "CIFAR10", "cifar10", 50_000),
    "cifar100": DatasetFacts("cifar100", "torchvision", 100, 3, 32, (0.5071, 0.4865, 0.4409),
                             (0.2673, 0.2564, 0.2762), "CIFAR100", "cifar100", 50_000),
    "imagenet100": DatasetFacts("imagenet100", "imagenet", 100, 3, None, IMAGENET_MEAN, IMAGENET_STD, None, "imagenet",
                                126_689),
    "imagenet200": DatasetFacts("imagenet200", "imagenet", 200, 3, None, IMAGENET_MEAN, IMAGENET_STD, None, "imagenet",
                                256_233),
}
ROOT_KEYS = tuple(sorted({f.root_key for f in DATASETS.values()}))


def facts(name: str) -> DatasetFacts:
    from itervision.errors import UserError

    if name not in DATASETS:
        raise UserError(f"unknown dataset '{name}'; known: {', '.join(DATASETS)}")
    return DATASETS[name]
