"""The listing of the ImageNet files a subset uses: the subset stage's DVC dependency instead of the ImageNet
folder itself (1.33M files that DVC would hash and whose state it would track). One file per dataset,
`data/sources/DATASET.csv`, made by `make imagenet-lists IMAGENET=/path/to/imagenet` and pointed at by
`data.sources.DATASET`:

    # root: /data/imagenet
    path,bytes
    train/n01440764/n01440764_10026.JPEG,13697
    ...
    val/n01440764/ILSVRC2012_val_00000293.JPEG,110922

Only the classes of the dataset's class list are listed (train/<synset>/ and val/<synset>/). The subset stage
checks every file's size against the listing as it reads it, and stops in one line when the folder changed since
it was listed. The checks of the layout happen here, before any image is read: a missing val/ folder, a flat
val/ (the ILSVRC2012 download puts the 50,000 validation images in one folder) and a class without its folder are
refused in one line.

    python -m itervision.pipeline.imagenet_lists /data/imagenet   # every ImageNet subset of params.yaml
    python -m itervision.data.source_list /data/imagenet data/splits/imagenet200.txt data/sources/imagenet200.csv
"""
from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

from itervision.errors import ArgumentParser, UserError, cli_entry
from itervision.io import atomic_path

IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png", ".bmp", ".webp"}


def _images(folder: Path) -> list[tuple[str, int]]:
    return sorted((e.name, e.stat().st_size) for e in _scandir(folder) if Path(e.name).suffix.lower() in IMAGE_SUFFIXES
                  and e.is_file())


def _scandir(folder: Path):
    try:
        with os.scandir(folder) as it:
            return list(it)
    except FileNotFoundError:
        return []


def check_layout(root: Path, synsets: list[str], class_list) -> None:
    """The ImageNet layout the subset needs, checked before any image is read."""
    if not (root / "train").is_dir():
        raise UserError(f"ImageNet root {root} has no train/ folder; pass the folder holding train/<synset>/")
    missing = [s for s in synsets if not (root / "train" / s).is_dir()]
    if missing:
        raise UserError(f"class {missing[0]} of {class_list} is absent from {root}/train"
                        + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                        + "; fix the class list or the ImageNet root")
    val = root / "val"
    if not val.is_dir():
        raise UserError(f"ImageNet root {root} has no val/ folder; the evaluation set needs val/<synset>/ folders")
    loose = [e.name for e in _scandir(val) if e.is_file() and Path(e.name).suffix.lower() in IMAGE_SUFFIXES]
    if loose:
        raise UserError(f"{val} is flat ({len(loose)} images directly in it, e.g. {loose[0]}); sort the images into "
                        f"val/<synset>/ folders (the ILSVRC2012 devkit's ground truth names each image's class) first")
    absent = [s for s in synsets if not (val / s).is_dir()]
    if absent:
        raise UserError(f"class {absent[0]} has no folder in {val}" + (f" (and {len(absent) - 1} more)"
                                                                       if len(absent) > 1 else "")
                        + "; sort the validation images into val/<synset>/ folders first")


def list_folder(root: Path, synsets: list[str], class_list) -> dict:
    """{(split, synset): [(relative path, bytes)]} of an ImageNet folder, after the layout checks."""
    check_layout(root, synsets, class_list)
    return {(split, s): [(f"{split}/{s}/{name}", size) for name, size in _images(root / split / s)]
            for split in ("train", "val") for s in synsets}


def write_listing(root: str | Path, class_lists: list, out: str | Path) -> int:
    """List the train and val images of every class of the class lists; returns the number of files."""
    from itervision.data.sources import read_class_list

    root = Path(root).resolve()
    synsets = sorted({s for cl in class_lists for s in read_class_list(cl)})
    listed = list_folder(root, synsets, ", ".join(map(str, class_lists)))
    rows = [row for key in sorted(listed) for row in listed[key]]
    with atomic_path(out) as tmp:
        with open(tmp, "w", newline="") as f:
            f.write(f"# root: {root}\n")
            writer = csv.writer(f)
            writer.writerow(["path", "bytes"])
            writer.writerows(rows)
    return len(rows)


def read_listing(path: Path) -> tuple[Path, dict]:
    """(root, {(split, synset): [(relative path, bytes)]}) of a listing file."""
    with open(path, newline="") as f:
        first = f.readline()
        if not first.startswith("# root: "):
            raise UserError(f"{path} is not a source listing (its first line must be '# root: FOLDER'); make it with "
                            f"`make imagenet-lists`")
        root = Path(first[len("# root: "):].strip())
        listed: dict = {}
        for r in csv.DictReader(f):
            try:
                split, syn, _ = r["path"].split("/", 2)
                listed.setdefault((split, syn), []).append((r["path"], int(r["bytes"])))
            except (KeyError, ValueError, TypeError, AttributeError):
                raise UserError(f"{path}: malformed row {r}; make it again with `make imagenet-lists`") from None
    return root, listed


def source_files(source: str | Path, synsets: list[str], class_list) -> tuple[Path, dict]:
    """(root, {(split, synset): [(relative path, bytes or None)]}) from a listing file or an ImageNet folder."""
    source = Path(source)
    if source.is_file():
        root, listed = read_listing(source)
        if not root.is_dir():
            raise UserError(f"the ImageNet root {root} named by {source} is not a folder here; mount it, or list the "
                            f"folder where it is (`make imagenet-lists IMAGENET=...`)")
        absent = [s for s in synsets if ("train", s) not in listed]
        if absent:
            raise UserError(f"class {absent[0]} of {class_list} is not in {source}; list the folder again for this "
                            f"class list (`make imagenet-lists`)")
        return root, {(split, s): listed.get((split, s), []) for split in ("train", "val") for s in synsets}
    if not source.exists() or not (source / "train").is_dir():
        raise UserError(f"ImageNet root {source} has no train/ folder; pass the folder holding train/<synset>/ or a "
                        f"listing of it (`make imagenet-lists`)")
    return source, {k: [(rel, None) for rel, _ in v] for k, v in list_folder(source, synsets, class_list).items()}


@cli_entry
def main(argv=None):
    ap = ArgumentParser(prog="python -m itervision.data.source_list", description=__doc__.split("\n\n")[0])
    ap.add_argument("root", help="the ImageNet folder (train/<synset>/, val/<synset>/)")
    ap.add_argument("class_lists", nargs="+", help="class list files, then the output file")
    args = ap.parse_args(argv)
    *lists, out = args.class_lists
    if not lists:
        raise UserError("give at least one class list and the output file")
    n = write_listing(args.root, lists, out)
    print(f"{out}: {n} images of {args.root}", file=sys.stderr)


if __name__ == "__main__":
    main()
