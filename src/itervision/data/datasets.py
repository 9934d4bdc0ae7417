"""Source datasets: torchvision's own classes from a local root, and ImageNet-layout folders.

Every dataset knows its classes, channels, native size and normalisation (`DatasetInfo`).
"""
from __future__ import annotations

import gzip
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from itervision.errors import UserError

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    channels: int
    native_size: int  # short side of the stored images (ImageNet: the evaluation resolution is a model param)
    mean: tuple
    std: tuple
    classes: tuple = field(default=())

    @property
    def num_classes(self) -> int:
        return len(self.classes)


FASHION_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                   "Ankle boot")

# Torchvision datasets: (torchvision class name, channels, native size, mean, std); classes come from the class.
TORCHVISION_DATASETS = {
    "mnist": ("MNIST", 1, 28, (0.1307,), (0.3081,)),
    "fashion_mnist": ("FashionMNIST", 1, 28, (0.2860,), (0.3530,)),
    "cifar10": ("CIFAR10", 3, 32, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ("CIFAR100", 3, 32, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}


def torchvision_info(name: str, classes: tuple = ()) -> DatasetInfo:
    if name not in TORCHVISION_DATASETS:
        raise UserError(f"unknown dataset '{name}'; known: {', '.join(TORCHVISION_DATASETS)} or an imagenet subset")
    _, channels, size, mean, std = TORCHVISION_DATASETS[name]
    return DatasetInfo(name, channels, size, mean, std, tuple(classes))


def _has_fashion_files(folder: Path) -> bool:
    return all((folder / f).exists() or (folder / f"{f}.gz").exists() for f in FASHION_MNIST_FILES)


def _stage_idx_files(src: Path, cache_root: Path) -> Path:
    """Lay idx files out where torchvision's FashionMNIST looks (<root>/FashionMNIST/raw/), decompressing .gz.

    The Debian package ships recompressed .gz files whose md5 differs from torchvision's download sums, so we
    decompress them ourselves instead of going through torchvision's download/extract path.
    """
    raw = cache_root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for name in FASHION_MNIST_FILES:
        dst = raw / name
        if dst.exists():
            continue
        tmp = raw / f".{name}.tmp"
        if (src / name).exists():
            shutil.copyfile(src / name, tmp)
        else:
            with gzip.open(src / f"{name}.gz", "rb") as fin, open(tmp, "wb") as fout:
                shutil.copyfileobj(fin, fout)
        tmp.replace(dst)
    return cache_root


def locate_fashion_mnist(root: str | None, cache_root: Path, download: bool) -> Path:
    """Return a torchvision root holding Fashion-MNIST: params root → Debian package → torchvision download."""
    tried = []
    if root:
        root_p = Path(root)
        if (root_p / "FashionMNIST" / "raw" / FASHION_MNIST_FILES[0]).exists():
            return root_p
        if _has_fashion_files(root_p):
            return _stage_idx_files(root_p, cache_root)
        tried.append(f"data.roots.fashion_mnist={root} has no idx files")
    if _has_fashion_files(DEBIAN_FASHION_MNIST):
        return _stage_idx_files(DEBIAN_FASHION_MNIST, cache_root)
    if (cache_root / "FashionMNIST" / "raw" / FASHION_MNIST_FILES[0]).exists():
        return cache_root
    if download:
        try:
            from torchvision import datasets

            datasets.FashionMNIST(str(cache_root), train=True, download=True)
            datasets.FashionMNIST(str(cache_root), train=False, download=True)
            return cache_root
        except Exception as err:  # network errors come in many types
            tried.append(f"download failed ({type(err).__name__})")
    detail = f" ({'; '.join(tried)})" if tried else ""
    raise UserError(
        "Fashion-MNIST not found" + detail + ": set data.roots.fashion_mnist in params.yaml to a folder with the "
        "idx files, or run `apt-get install -y dataset-fashion-mnist` (files in /usr/share/datasets/fashion-mnist/), "
        "or set data.download: true to let torchvision download it"
    )


def load_torchvision(name: str, root: str | None, cache_root: str | Path, download: bool = False):
    """Load a whole torchvision dataset as uint8 arrays.

    Returns (info, {"train": (images NHWC uint8, labels int64), "test": (...)}).
    """
    if name not in TORCHVISION_DATASETS:
        torchvision_info(name)  # raises the unknown-dataset error
    from torchvision import datasets

    cls_name = TORCHVISION_DATASETS[name][0]
    cache_root = Path(cache_root)
    if name == "fashion_mnist":
        tv_root = locate_fashion_mnist(root, cache_root, download)
        do_download = False
    else:
        tv_root = Path(root) if root else cache_root
        do_download = download
    cls = getattr(datasets, cls_name)
    splits = {}
    try:
        for split, train in (("train", True), ("test", False)):
            ds = cls(str(tv_root), train=train, download=do_download)
            images = np.asarray(ds.data)
            if images.ndim == 3:
                images = images[..., None]  # N, H, W -> N, H, W, 1
            labels = np.asarray(ds.targets, dtype=np.int64)
            splits[split] = (images.astype(np.uint8), labels)
    except RuntimeError as err:  # torchvision: "Dataset not found. You can use download=True to download it"
        raise UserError(
            f"{name} not found under {tv_root} ({err}); set data.roots.{name} in params.yaml to its folder "
            f"or data.download: true where the network allows"
        ) from None
    info = torchvision_info(name, tuple(ds.classes))
    return info, splits


def list_imagenet_classes(root: str | Path, split: str = "train") -> list[str]:
    folder = Path(root) / split
    if not folder.is_dir():
        raise UserError(f"ImageNet folder {folder} not found; pass the root that holds train/<synset>/ and val/<synset>/")
    return sorted(p.name for p in folder.iterdir() if p.is_dir())


IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png", ".bmp", ".webp"}


def list_images(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


def read_class_list(path: str | Path) -> list[str]:
    """One class id (e.g. an ImageNet synset) a line; '#' starts a comment."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"class list {path} not found; give a file with one class id a line")
    names = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    if not names:
        raise UserError(f"class list {path} is empty; put one class id a line")
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise UserError(f"class list {path} repeats {', '.join(dup[:5])}; each class once")
    return names
