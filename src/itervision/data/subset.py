"""Deterministic dataset subsets.

* Torchvision datasets (CPU scale): a class list and per-class counts for train / calib / test, drawn by
  seed, written as one `.npz` per split (uint8 NHWC images + labels) with `manifest.json`.
* ImageNet-layout folders (paper scale): a class list file, optional short-side resize, N train images per
  class held out into the evaluation set, written as tar shards + `index.csv` + `summary.json` (data/shards.py).
  The source is the listing of the files used (data/source_list.py: names and sizes; the DVC dependency), or
  an ImageNet folder itself.

Both write into a temporary folder and rename it into place at the end, so a failed run leaves nothing that
looks complete.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from itervision.data.registry import facts
from itervision.data.shards import ShardImage, write_index, write_shards
from itervision.data.source_list import source_files
from itervision.data.sources import load_source, read_class_list
from itervision.errors import UserError
from itervision.io import commit_dir, fresh_temp_dir, write_json, write_npz

SPLITS = ("train", "calib", "test")


def _resolve_classes(requested, available: list[str]) -> list[int]:
    """`all`, or a list of class names / indices of the source dataset → source class indices."""
    if requested in (None, "all"):
        return list(range(len(available)))
    if not isinstance(requested, list) or not requested:
        raise UserError("subset classes must be 'all' or a non-empty list of class names or indices")
    out = []
    for c in requested:
        if isinstance(c, int) and 0 <= c < len(available):
            out.append(c)
        elif isinstance(c, str) and c in available:
            out.append(available.index(c))
        else:
            raise UserError(f"class {c!r} is not in the source dataset (classes: {', '.join(map(str, available))})")
    return out


def _draw_per_class(labels: np.ndarray, classes: list[int], counts: list, rng: np.random.Generator):
    """For each class, a random permutation of its indices cut into consecutive, disjoint chunks of `counts`;
    a count of 'all' (allowed only as the last) takes whatever the earlier chunks left."""
    if any(n == "all" for n in counts[:-1]):
        raise UserError("only the last per-class count of a source split may be 'all'")
    chunks = [[] for _ in counts]
    for c in classes:
        idx = np.flatnonzero(labels == c)
        fixed = sum(n for n in counts if n != "all")
        if fixed > len(idx):
            raise UserError(f"class {c} has {len(idx)} images, {fixed} requested; lower the per-class counts")
        idx = idx[rng.permutation(len(idx))]
        start = 0
        for i, n in enumerate(counts):
            n = len(idx) - start if n == "all" else int(n)
            chunks[i].append(np.sort(idx[start:start + n]))
            start += n
    return [np.concatenate(ch) if ch else np.zeros(0, np.int64) for ch in chunks]


def subset_torchvision(name: str, out: str | Path, *, classes="all", train_per_class, calib_per_class: int,
                       test_per_class, seed: int, root: str | Path, verify: bool = True) -> dict:
    out = Path(out)
    class_names, source = load_source(name, root, verify)
    info = facts(name)
    class_idx = _resolve_classes(classes, class_names)
    remap = {c: i for i, c in enumerate(class_idx)}
    rng = np.random.default_rng(seed)
    train_labels = source["train"][1]
    calib_ids, train_ids = _draw_per_class(train_labels, class_idx, [calib_per_class, train_per_class], rng)
    (test_ids,) = _draw_per_class(source["test"][1], class_idx, [test_per_class], rng)
    picks = {"train": ("train", train_ids), "calib": ("train", calib_ids), "test": ("test", test_ids)}
    tmp = fresh_temp_dir(out)
    manifest = {
        "dataset": name, "seed": seed, "classes": [class_names[c] for c in class_idx],
        "source_class_indices": class_idx, "channels": info.channels, "native_size": info.native_size,
        "mean": list(info.mean), "std": list(info.std), "splits": {},
    }
    for split, (src_split, ids) in picks.items():
        images, labels = source[src_split]
        ids = ids[rng.permutation(len(ids))]  # a seeded random order: any prefix is a sample of every class
        x = np.ascontiguousarray(images[ids])
        y = np.array([remap[int(v)] for v in labels[ids]], dtype=np.int64)
        write_npz(tmp / f"{split}.npz", {"images": x, "labels": y, "source_index": ids.astype(np.int64)})
        manifest["splits"][split] = {
            "file": f"{split}.npz", "source_split": src_split, "count": int(len(y)),
            "per_class": np.bincount(y, minlength=len(class_idx)).tolist(),
            "sha1": hashlib.sha1(x.tobytes() + y.tobytes()).hexdigest(),
        }
    write_json(tmp / "manifest.json", manifest)
    commit_dir(tmp, out)
    return manifest


# ---------------------------------------------------------------- ImageNet-layout folders

def _convert_one(job):
    """Open and verify one image. An RGB JPEG that needs no resize is kept as it is (its bytes go into the shard
    unchanged); anything else (a resize, grayscale, CMYK, PNG, alpha) is converted to RGB and saved once as JPEG
    quality 95. Returns (file whose bytes go into the shard, error, (width, height))."""
    from PIL import Image

    src, dst, short_side, expected_bytes = job
    try:
        if expected_bytes is not None and os.path.getsize(src) != expected_bytes:
            return src, "changed since listed", None
        with Image.open(src) as im:
            im.load()
            if im.format == "JPEG" and im.mode == "RGB" and not short_side:
                return src, None, im.size
            if im.mode in ("RGBA", "LA", "P"):
                im = im.convert("RGBA")
                background = Image.new("RGBA", im.size, (255, 255, 255, 255))
                im = Image.alpha_composite(background, im)
            im = im.convert("RGB")
            if short_side:
                w, h = im.size
                scale = short_side / min(w, h)
                if scale != 1:
                    im = im.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.BICUBIC)
            Path(dst).parent.mkdir(parents=True, exist_ok=True)
            im.save(dst, "JPEG", quality=95)
            return dst, None, im.size
    except Exception as err:  # PIL raises many types for corrupt files
        return dst, f"{type(err).__name__}: {err}", None


def subset_imagenet(source: str | Path, class_list: str | Path, out: str | Path, *, holdout_per_class: int,
                    seed: int, calib_per_class: int = 0, short_side: int | None = None,
                    max_bad_fraction: float = 0.001, workers: int = 1, images_per_shard: int = 1024) -> dict:
    """Subset an ImageNet-layout tree (or the listing of one, data/source_list.py) into shards.

    Splits: train; holdout (N train images per class, part of the evaluation set, as the document does);
    calib (more train images per class, held out to choose early-exit thresholds); val. The evaluation set is
    val + holdout. All hold-outs are drawn per class by seed and removed from train. Every image is verified
    first, then the hold-outs are drawn among the readable ones, so an unreadable file never takes a hold-out or
    calibration place. A missing or flat val/ is refused before any image is read (source_files).
    """
    out = Path(out)
    synsets = read_class_list(class_list)
    root, listed = source_files(source, synsets, class_list)
    tmp = fresh_temp_dir(out)
    try:
        jobs, sources = _conversion_jobs(root, listed, synsets, tmp / "_pool", short_side,
                                         holdout_per_class + calib_per_class)
        good, bad = _convert_all(jobs, sources, workers, max_bad_fraction)
        rng = np.random.default_rng(seed)
        placed = _place(good, synsets, rng, holdout_per_class, calib_per_class)
        counts = {s: {syn: 0 for syn in synsets} for s in ("train", "calib", "holdout", "val")}
        for im in placed:
            counts[im.split][im.synset] += 1
        _check_class_counts(counts, calib_per_class)
        rows, shards = [], {}
        for split in ("train", "calib", "holdout", "val"):
            chosen = [im for im in placed if im.split == split]
            chosen = [chosen[i] for i in rng.permutation(len(chosen))]  # classes mixed within every shard
            r, shards[split] = write_shards(chosen, tmp, split, images_per_shard)
            rows += r
        write_index(tmp, rows)
        shutil.rmtree(tmp / "_pool", ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    summary = {
        "format": "shards", "source": str(source), "root": str(root), "class_list": str(class_list),
        "classes": synsets, "seed": seed, "short_side": short_side, "holdout_per_class": holdout_per_class,
        "calib_per_class": calib_per_class, "images_per_shard": images_per_shard,
        "totals": {s: sum(c.values()) for s, c in counts.items()}, "per_class": counts, "bad_images": bad,
        "reencoded": sum(1 for im in placed if "_pool" in im.path.parts),
        "shards": shards,
    }
    write_json(tmp / "summary.json", summary)
    commit_dir(tmp, out)
    return summary


def _conversion_jobs(root: Path, listed: dict, synsets: list, pool: Path, short_side, held_out: int):
    """([(source, pool path, short side, listed bytes)], [(class index, synset, source split, source)]) of every
    train and val image."""
    jobs, sources = [], []
    for ci, syn in enumerate(synsets):
        train_files = listed[("train", syn)]
        if len(train_files) < held_out + 1:
            raise UserError(f"class {syn} has {len(train_files)} train images, cannot hold out {held_out}; lower "
                            f"holdout_per_class/calib_per_class")
        for split in ("train", "val"):
            for rel, size in listed[(split, syn)]:
                jobs.append((str(root / rel), str(pool / split / syn / f"{Path(rel).stem}.JPEG"), short_side, size))
                sources.append((ci, syn, split, rel))
    return jobs, sources


def _convert_all(jobs, sources, workers: int, max_bad_fraction: float):
    """({(class index, source split): [ShardImage]}, [unreadable images]); too many unreadable images is an
    error, and so is a file that changed since it was listed."""
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(_convert_one, jobs, chunksize=64))
    else:
        results = [_convert_one(j) for j in jobs]
    changed = [jobs[i][0] for i, (_, err, _) in enumerate(results) if err == "changed since listed"]
    if changed:
        raise UserError(f"{changed[0]} (and {len(changed) - 1} more) changed size since the source was listed; list "
                        f"it again (`make imagenet-lists`) and rerun")
    bad = [{"path": jobs[i][0], "error": err} for i, (_, err, _) in enumerate(results) if err]
    fraction = len(bad) / max(1, len(jobs))
    if fraction > max_bad_fraction:
        raise UserError(f"{len(bad)} of {len(jobs)} images are unreadable ({fraction:.2%} > max_bad_fraction "
                        f"{max_bad_fraction:.2%}), first: {bad[0]['path']}; repair the source or raise the limit")
    good = {}
    for (ci, syn, split, rel), (path, err, size) in zip(sources, results):
        if not err:
            key = f"{split}-{syn}-{Path(rel).stem}".replace(".", "_")  # WebDataset keys end at the first dot
            good.setdefault((ci, split), []).append(ShardImage(
                key=key, split=split, class_index=ci, synset=syn, data=None, path=Path(path), width=size[0],
                height=size[1], source=rel))
    return good, bad


def _place(good: dict, synsets: list, rng, holdout: int, calib: int) -> list[ShardImage]:
    """Draw each class's hold-out and calibration images by seed; every image with its split."""
    placed = []
    for ci, syn in enumerate(synsets):
        train = good.get((ci, "train"), [])
        order = rng.permutation(len(train)).tolist()
        split_of = {i: "holdout" for i in order[:holdout]}
        split_of.update({i: "calib" for i in order[holdout:holdout + calib]})
        for i, im in enumerate(train):
            im.split = split_of.get(i, "train")
            placed.append(im)
        placed += good.get((ci, "val"), [])
    return placed


def _check_class_counts(counts: dict, calib: int) -> None:
    """Fail when a class has no usable image in a split that must hold some (train; val or the hold-out,
    which make the evaluation set; calib when asked for); warn when a class has no val images."""
    empty = []
    for syn in counts["train"]:
        if counts["train"][syn] == 0:
            empty.append(f"{syn} has no usable train image")
        if counts["val"][syn] + counts["holdout"][syn] == 0:
            empty.append(f"{syn} has no evaluation image (no val images and no hold-out)")
        if calib and counts["calib"][syn] == 0:
            empty.append(f"{syn} has no calibration image")
    if empty:
        raise UserError(f"class {empty[0]}" + (f" (and {len(empty) - 1} more)" if len(empty) > 1 else "")
                        + "; every class needs images in every split: fix the source folder or the class list")
    no_val = [syn for syn in counts["val"] if counts["val"][syn] == 0]
    if no_val:
        print(f"warning: {len(no_val)} classes (first {no_val[0]}) have no val images; their evaluation images "
              f"are the hold-out alone", file=sys.stderr)
