"""Prepared ImageNet subsets as shards: a few hundred tar files per dataset instead of one file an image.

    data/prepared/DATASET/
        shards/train-00000.tar ...   each member KEY.jpg (an RGB JPEG) and KEY.cls (its class index, text)
        index.csv                    one row an image: key, split, class_index, synset, shard, offset, bytes,
                                     width, height, source (the file it came from)
        summary.json                 classes, counts, the shard files with their sizes and sha1

Why tar (the WebDataset layout): any tool lists and extracts it (`tar tf`), a shard is read sequentially at disk
speed, and with the byte offsets of index.csv any image is one `pread`, so the seeded sampler (repeated
augmentation, resume at a batch) keeps its random access without a database. DVC tracks a few hundred files
(hashing and caching about 266k small files was minutes per ImageNet-200 change). The images are stored as JPEG
bytes, as the source had them where no resize was asked and the source was an RGB JPEG (no re-encoding, no size
growth), otherwise re-encoded once at quality 95; decoding happens where the run augments (loader workers, or the
GPU in batches: data/device_augment.py).
"""
from __future__ import annotations

import csv
import hashlib
import io
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from itervision.errors import UserError

INDEX_FIELDS = ("key", "split", "class_index", "synset", "shard", "offset", "bytes", "width", "height", "source")


@dataclass
class ShardImage:
    key: str
    split: str
    class_index: int
    synset: str
    data: bytes | None     # JPEG bytes (None: read from `path`)
    path: Path | None
    width: int
    height: int
    source: str


def write_shards(images: list[ShardImage], out: Path, split: str, per_shard: int) -> tuple[list[dict], list[dict]]:
    """Write the images of one split (in the given order) into out/shards/SPLIT-NNNNN.tar, `per_shard` a file.
    Returns (index rows, shard records)."""
    (out / "shards").mkdir(parents=True, exist_ok=True)
    rows, shards = [], []
    for n, start in enumerate(range(0, len(images), per_shard)):
        name = f"shards/{split}-{n:05d}.tar"
        chunk = images[start:start + per_shard]
        with tarfile.open(out / name, "w", format=tarfile.USTAR_FORMAT) as tar:
            for im in chunk:
                data = im.data if im.data is not None else im.path.read_bytes()
                for suffix, payload in ((".jpg", data), (".cls", str(im.class_index).encode())):
                    info = tarfile.TarInfo(im.key + suffix)
                    info.size, info.mtime, info.mode = len(payload), 0, 0o644  # no clock: shards are reproducible
                    tar.addfile(info, io.BytesIO(payload))
        offsets = {}
        with tarfile.open(out / name) as tar:  # the data offsets as tar wrote them
            for member in tar:
                if member.name.endswith(".jpg"):
                    offsets[member.name[:-4]] = (member.offset_data, member.size)
        for im in chunk:
            offset, size = offsets[im.key]
            rows.append({"key": im.key, "split": split, "class_index": im.class_index, "synset": im.synset,
                         "shard": name, "offset": offset, "bytes": size, "width": im.width, "height": im.height,
                         "source": im.source})
        shards.append({"file": name, "images": len(chunk), "bytes": (out / name).stat().st_size,
                       "sha1": _sha1(out / name)})
    return rows, shards


def _sha1(path: Path) -> str:
    h = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_index(out: Path, rows: list[dict]) -> None:
    with open(out / "index.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=INDEX_FIELDS)
        writer.writeheader()
        writer.writerows(rows)


class ShardIndex:
    """The images of some splits of a sharded dataset: labels in memory, JPEG bytes read on demand (one pread
    from an open shard; each loader process opens its own files)."""

    def __init__(self, root: Path, splits: tuple):
        self.root = Path(root)
        path = self.root / "index.csv"
        if not path.exists():
            raise UserError(f"{path} is missing; regenerate it with `dvc repro --force make_subset@{self.root.name}`")
        keys, shards, offsets, sizes, labels = [], [], [], [], []
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                if r["split"] in splits:
                    keys.append(r["key"])
                    shards.append(r["shard"])
                    offsets.append(int(r["offset"]))
                    sizes.append(int(r["bytes"]))
                    labels.append(int(r["class_index"]))
        self.keys, self.shards = keys, shards
        self.offsets, self.sizes = np.array(offsets, np.int64), np.array(sizes, np.int64)
        self.labels = np.array(labels, np.int64)
        self._files: dict = {}
        self._pid = None

    def __len__(self) -> int:
        return len(self.keys)

    def __getstate__(self):  # sent to loader processes without open files
        state = dict(self.__dict__)
        state["_files"], state["_pid"] = {}, None
        return state

    def read(self, i: int) -> bytes:
        if self._pid != os.getpid():  # a forked loader process opens its own files
            self._files, self._pid = {}, os.getpid()
        shard = self.shards[i]
        fd = self._files.get(shard)
        if fd is None:
            try:
                fd = self._files[shard] = os.open(self.root / shard, os.O_RDONLY)
            except OSError as err:
                raise UserError(f"shard {self.root / shard} is unreadable ({err.strerror}); regenerate it with "
                                f"`dvc repro --force make_subset@{self.root.name}`") from None
        data = os.pread(fd, int(self.sizes[i]), int(self.offsets[i]))
        if len(data) != self.sizes[i]:
            raise UserError(f"shard {self.root / shard} is truncated at image {self.keys[i]}; regenerate it with "
                            f"`dvc repro --force make_subset@{self.root.name}`")
        return data
