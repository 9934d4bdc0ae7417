"""Source datasets read from their published file formats: MNIST-style idx files (plain or .gz) and CIFAR
python pickle batches; and the listing of ImageNet-layout folders.

Each dataset is read from the folder `data.sources.<dataset>` names: the files directly in it, or in
torchvision's layout (`<root>/FashionMNIST/raw/`, `<root>/cifar-10-batches-py/`). That folder is the subset
stage's DVC dependency, so a changed source file reruns the stage. Nothing is copied or cached, and nothing
falls back to another copy. Fashion-MNIST is the Debian package dataset-fashion-mnist
(`/usr/share/datasets/fashion-mnist/`, what `make setup` installs); `python -m itervision.data.download` fetches
the torchvision datasets into a folder.

The files are parsed here rather than through torchvision's dataset classes: those insist on their own folder
layout with uncompressed idx files (which forced a staging copy that went stale). Checksums (`verify`, params
subset.verify_checksums): every file with a published md5 (torchvision's tables of the official CIFAR batches and
MNIST / Fashion-MNIST .gz downloads) must match it; Debian's recompressed Fashion-MNIST files, whose .gz differ,
must match the sha256 of the official decompressed content instead. A plain MNIST idx file has no published sum
and is read unchecked. Synthetic stand-ins (tests, `make paper-smoke`) turn the check off. CIFAR pickles are read with an
unpickler that only builds lists, dicts, strings, bytes, numbers and numpy arrays: the files stay data.
"""
from __future__ import annotations

import gzip
import io
import pickle
import zlib
from pathlib import Path

import numpy as np

from itervision.data.registry import DATASETS, facts
from itervision.errors import UserError

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
IDX_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
             "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
CLASS_NAMES = {
    "mnist": ["0 - zero", "1 - one", "2 - two", "3 - three", "4 - four", "5 - five", "6 - six", "7 - seven",
              "8 - eight", "9 - nine"],
    "fashion_mnist": ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                      "Ankle boot"],
}
CIFAR = {"cifar10": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"],
                     "batches.meta", "labels", "label_names"),
         "cifar100": ("cifar-100-python", ["train"], ["test"], "meta", "fine_labels", "fine_label_names")}


# sha256 of the decompressed idx files of Fashion-MNIST (zalandoresearch's release; Debian's package holds the same
# bytes, recompressed, so its .gz md5 differ from torchvision's table)
CONTENT_SHA256 = {"fashion_mnist": {
    "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"}}


def published_md5(name: str) -> dict:
    """{file name: md5} of the official files, from torchvision's own tables."""
    import torchvision.datasets as tv

    if name in CIFAR:
        cls = tv.CIFAR10 if name == "cifar10" else tv.CIFAR100
        return dict(cls.train_list + cls.test_list)
    cls = {"mnist": tv.MNIST, "fashion_mnist": tv.FashionMNIST}.get(name)
    return {} if cls is None else {url.rsplit("/", 1)[-1]: md5 for url, md5 in cls.resources}


def verify_file(name: str, path: Path, content: bytes | None = None) -> str:
    """'md5', 'content' (the file matched that published sum) or 'unchecked' (none is published); a mismatch is a
    one-line error."""
    import hashlib

    fix = (f"replace it with an intact copy of the official {name} files, or set subset.verify_checksums: false "
           f"for stand-in data")
    expected = published_md5(name).get(path.name)
    if expected and hashlib.md5(path.read_bytes()).hexdigest() == expected:
        return "md5"
    stem = path.name[:-3] if path.name.endswith(".gz") else path.name
    by_content = CONTENT_SHA256.get(name, {}).get(stem)
    if by_content:
        raw = content if content is not None else (gzip.decompress(path.read_bytes()) if path.suffix == ".gz"
                                                   else path.read_bytes())
        if hashlib.sha256(raw).hexdigest() == by_content:
            return "content"
        raise UserError(f"{path} does not match the published {name} data (sha256 of its content); {fix}")
    if expected:
        raise UserError(f"{path} does not match the published md5 {expected}; {fix}")
    return "unchecked"


# ------------------------------------------------------------------------------------------ idx (MNIST-style)

def _idx_path(folder: Path, name: str) -> Path | None:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.exists():
            return candidate
    return None


def _idx_folder(folder: Path, tv_class: str) -> Path | None:
    """The folder holding all four idx files: `folder` itself or torchvision's `folder/<Class>/raw`."""
    for f in (folder, folder / tv_class / "raw"):
        if all(_idx_path(f, n) for pair in IDX_FILES.values() for n in pair):
            return f
    return None


def read_idx(path: Path) -> np.ndarray:
    """An idx file (LeCun's MNIST format: magic 0x0000 08 NDIM, big-endian sizes, uint8 data), plain or gzip."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, zlib.error) as err:
        raise UserError(f"{path} is not a readable gzip file ({type(err).__name__}: {err}); replace it with an "
                        f"intact copy") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08 or not 1 <= raw[3] <= 4:
        raise UserError(f"{path} is not an idx file of unsigned bytes (bad header); replace it with an intact copy")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    body = raw[4 + 4 * ndim:]
    expected = int(np.prod(shape))
    if len(body) < expected:
        raise UserError(f"{path} holds {len(body)} bytes of data where its header promises {expected}: it is "
                        f"truncated; replace it with an intact copy")
    if len(body) > expected:
        raise UserError(f"{path} holds {len(body) - expected} bytes after the {expected} its header promises (another "
                        f"file appended, or a wrong header); replace it with an intact copy")
    return np.frombuffer(body, dtype=np.uint8).reshape(shape)


def _read_idx_splits(folder: Path, name: str, verify: bool) -> dict:
    splits = {}
    for split, (img_name, lbl_name) in IDX_FILES.items():
        if verify:
            for n in (img_name, lbl_name):
                verify_file(name, _idx_path(folder, n))
        images, labels = read_idx(_idx_path(folder, img_name)), read_idx(_idx_path(folder, lbl_name))
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise UserError(f"{folder}: {img_name} has shape {images.shape} and {lbl_name} {labels.shape}; they must "
                            f"be N x H x W images and N labels")
        splits[split] = (images[..., None].copy(), labels.astype(np.int64))
    return splits


# ------------------------------------------------------------------------------------------ CIFAR pickles

class _DataUnpickler(pickle.Unpickler):
    """Builds plain data and numpy arrays only; any other class in the file is refused."""
    ALLOWED = {("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"),
               ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar"), ("builtins", "bytearray")}

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def _load_pickle(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            data = _DataUnpickler(io.BytesIO(f.read()), encoding="latin1").load()
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError) as err:
        raise UserError(f"{path} is not a readable CIFAR batch ({type(err).__name__}: {err}); replace it with an "
                        f"intact copy") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} does not hold a CIFAR batch (a dict); replace it with an intact copy")
    return data


def _cifar_folder(folder: Path, name: str) -> Path | None:
    base, train, test, meta, _, _ = CIFAR[name]
    for f in (folder / base, folder):
        if all((f / n).exists() for n in train + test + [meta]):
            return f
    return None


def _read_cifar(folder: Path, name: str, verify: bool) -> tuple[list, dict]:
    _, train, test, meta, label_key, names_key = CIFAR[name]
    if verify:
        for fname in train + test:
            verify_file(name, folder / fname)
    splits = {}
    for split, files in (("train", train), ("test", test)):
        images, labels = [], []
        for fname in files:
            d = _load_pickle(folder / fname)
            if "data" not in d or label_key not in d:
                raise UserError(f"{folder / fname} lacks 'data' or '{label_key}'; replace it with an intact copy")
            data = np.asarray(d["data"], dtype=np.uint8)
            if data.ndim != 2 or data.shape[1] != 3072 or len(data) != len(d[label_key]):
                raise UserError(f"{folder / fname}: data has shape {data.shape} for {len(d[label_key])} labels; "
                                f"expected N x 3072 (3 x 32 x 32)")
            images.append(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
            labels.append(np.asarray(d[label_key], dtype=np.int64))
        splits[split] = (np.ascontiguousarray(np.concatenate(images)), np.concatenate(labels))
    classes = [str(c) for c in _load_pickle(folder / meta).get(names_key, [])]
    return classes, splits


# ------------------------------------------------------------------------------------------ locating

def _find(name: str, folder: Path) -> Path | None:
    f = facts(name)
    return _cifar_folder(folder, name) if name in CIFAR else _idx_folder(folder, f.torchvision_class)


def locate(name: str, root: str | Path) -> Path:
    """The folder the dataset's files are read from: `root` itself or torchvision's layout below it."""
    root = Path(root)
    found = _find(name, root) if root.is_dir() else None
    if found is None:
        what = "cifar batches" if name in CIFAR else "four idx files"
        hint = (" (`make setup` installs the Debian package dataset-fashion-mnist into "
                f"{DEBIAN_FASHION_MNIST})" if name == "fashion_mnist" else
                f" (`python -m itervision.data.download {name} {root}` fetches it)")
        raise UserError(f"data.sources.{name} = {root} does not hold the {name} files ({what}, directly or in "
                        f"torchvision's layout); point it at a folder that does{hint}")
    return found


def load_source(name: str, root: str | Path, verify: bool = True):
    """(class names, {"train": (uint8 NHWC images, int64 labels), "test": (...)}) of a torchvision dataset, its
    files checked against the published checksums (`verify`)."""
    f = facts(name)
    if f.source != "torchvision":
        raise UserError(f"dataset '{name}' is an ImageNet subset, not an array dataset; list it under "
                        f"subset.imagenet")
    folder = locate(name, root)
    if name in CIFAR:
        classes, splits = _read_cifar(folder, name, verify)
    else:
        classes, splits = CLASS_NAMES[name], _read_idx_splits(folder, name, verify)
    for split, (images, labels) in splits.items():
        if images.shape[1:] != (f.native_size, f.native_size, f.channels):
            raise UserError(f"{name} {split} images in {folder} have shape {images.shape[1:]}, expected "
                            f"{(f.native_size, f.native_size, f.channels)}")
        if len(labels) and (labels.min() < 0 or labels.max() >= f.num_classes):
            raise UserError(f"{name} {split} labels in {folder} run outside 0..{f.num_classes - 1}")
    if len(classes) != f.num_classes:
        classes = [str(i) for i in range(f.num_classes)]
    return classes, splits


# ------------------------------------------------------------------------------------------ ImageNet layout

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


__all__ = ["DATASETS", "load_source", "locate", "read_idx", "list_images", "read_class_list"]
