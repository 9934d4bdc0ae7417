"""Synthetic stand-ins for the source datasets, written in their real file formats, for smoke runs and tests:

* MNIST and Fashion-MNIST: the four idx files, gzip-compressed, as published;
* CIFAR-10/100: the python pickle batches (cifar-10-batches-py/, cifar-100-python/) with their meta files;
* ImageNet: train/<synset>/ and val/<synset>/ JPEGs at realistic sizes, for every class of the given class
  lists, with a few CMYK, grayscale and truncated files among them (the subset stage must cope with all).

Each class has its own coarse pattern plus noise, so a model learns something in a few steps. Nothing here is
used by the CPU-scale pipeline, which reads the real Fashion-MNIST.

    python -m itervision.data.synthetic --out /tmp/paper-smoke-data   # all four array datasets and ImageNet
"""
from __future__ import annotations

import argparse
import gzip
import pickle
from pathlib import Path

import numpy as np

from itervision.data.sources import CIFAR, IDX_FILES, read_class_list


def _patterns(n: int, labels: np.ndarray, size: int, channels: int, classes: int, rng) -> np.ndarray:
    """uint8 (n, size, size, channels): noise plus a bright band whose position and angle depend on the class."""
    yy, xx = np.mgrid[0:size, 0:size] / size
    images = rng.integers(0, 90, (n, size, size, channels)).astype(np.float32)
    for c in range(classes):
        angle = np.pi * (c % 10) / 10
        offset = (c // 10) / max(1, (classes - 1) // 10 + 1)
        band = (np.abs(np.cos(angle) * (xx - 0.5) + np.sin(angle) * (yy - 0.5) - offset * 0.3) < 0.12)
        images[labels == c] += 150 * band[None, :, :, None]
    return np.clip(images, 0, 255).astype(np.uint8)


def _write_idx(path: Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def idx_dataset(out: str | Path, train_per_class: int, test_per_class: int, seed: int = 0) -> Path:
    """MNIST-format folder (four .gz idx files) with 10 classes of 28 x 28 images."""
    out, rng = Path(out), np.random.default_rng(seed)
    for split, per_class in (("train", train_per_class), ("test", test_per_class)):
        labels = rng.permutation(np.repeat(np.arange(10), per_class)).astype(np.uint8)
        images = _patterns(len(labels), labels, 28, 1, 10, rng)[..., 0]
        img_name, lbl_name = IDX_FILES[split]
        _write_idx(out / f"{img_name}.gz", images)
        _write_idx(out / f"{lbl_name}.gz", labels)
    return out


def cifar_dataset(out: str | Path, name: str, train_per_class: int, test_per_class: int, seed: int = 0) -> Path:
    """CIFAR python-format folder (the pickle batches and meta file) with 10 or 100 classes of 32 x 32 x 3."""
    base, train_files, test_files, meta, label_key, names_key = CIFAR[name]
    classes = 10 if name == "cifar10" else 100
    folder, rng = Path(out) / base, np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for files, per_class in ((train_files, train_per_class), (test_files, test_per_class)):
        labels = rng.permutation(np.repeat(np.arange(classes), per_class))
        images = _patterns(len(labels), labels, 32, 3, classes, rng)
        data = images.transpose(0, 3, 1, 2).reshape(len(labels), -1)
        for part, idx in zip(files, np.array_split(np.arange(len(labels)), len(files))):
            with open(folder / part, "wb") as f:
                pickle.dump({"data": data[idx], label_key: labels[idx].tolist(), "batch_label": part}, f)
    with open(folder / meta, "wb") as f:
        pickle.dump({names_key: [f"class_{i}" for i in range(classes)]}, f)
    return Path(out)


def imagenet_tree(out: str | Path, class_lists: list, train_per_class: int = 3, val_per_class: int = 1,
                  seed: int = 0) -> Path:
    """ImageNet-layout tree for the union of the class lists: JPEGs 200-500 px on a side, every 50th one
    CMYK, every 50th (offset) grayscale, and three extra truncated train files (in the first three classes)."""
    from PIL import Image

    out, rng = Path(out), np.random.default_rng(seed)
    synsets = sorted({s for lst in class_lists for s in read_class_list(lst)})
    count = 0
    for ci, syn in enumerate(synsets):
        for split, n in (("train", train_per_class), ("val", val_per_class)):
            folder = out / split / syn
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                w, h = int(rng.integers(200, 500)), int(rng.integers(200, 500))
                base = np.full((h, w, 3), (ci * 37 % 256, ci * 91 % 256, ci * 53 % 256), dtype=np.uint8)
                noise = rng.integers(0, 60, (h, w, 3), dtype=np.uint8)
                img = Image.fromarray(base // 2 + noise)
                mode = "CMYK" if count % 50 == 7 else "L" if count % 50 == 23 else "RGB"
                img.convert(mode).save(folder / f"{syn}_{split}_{i}.JPEG", "JPEG", quality=80)
                count += 1
    for syn in synsets[:3]:  # truncated JPEGs, beside the usable ones
        good = sorted((out / "train" / syn).iterdir())[0]
        (out / "train" / syn / f"{syn}_train_truncated.JPEG").write_bytes(good.read_bytes()[:300])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder to fill (one subfolder per dataset)")
    ap.add_argument("--train-per-class", type=int, default=20)
    ap.add_argument("--test-per-class", type=int, default=5)
    ap.add_argument("--imagenet-lists", nargs="*", default=["data/splits/imagenet100.txt",
                                                            "data/splits/imagenet200.txt"])
    args = ap.parse_args(argv)
    out = Path(args.out)
    for name in ("mnist", "fashion_mnist"):
        idx_dataset(out / name, args.train_per_class, args.test_per_class, seed=len(name))
    for name in ("cifar10", "cifar100"):
        small = name == "cifar100"  # 100 classes: half the images per class
        cifar_dataset(out / name, name, max(6, args.train_per_class // 2) if small else args.train_per_class,
                      2 if small else args.test_per_class, seed=len(name))
    if args.imagenet_lists:
        imagenet_tree(out / "imagenet", args.imagenet_lists)
    print(f"synthetic datasets in {out}")


if __name__ == "__main__":
    main()
