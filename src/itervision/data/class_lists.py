"""ImageNet subset class lists.

`imagenet200.txt` was drawn once with:
    python -m itervision.data.class_lists --n 200 --seed 20260805 --out data/splits/imagenet200.txt
from the 1000 ImageNet-1K synsets shipped with timm (timm/data/_info/imagenet_synsets.txt), sorted order,
numpy's default_rng(seed).choice without replacement, written back in sorted order.

Document 003 also drew its 200 classes at random, and keeps its list in its own code repository, not in the
document: this draw is not that list, so ImageNet-200 here is another random 200-class subset of the same size
and recipe. A user who has the published list puts it in a file (one synset a line, '#' comments) and points
`subset.imagenet.imagenet200.class_list` at it; the subset, every resolved configuration and every run follow.
"""
from __future__ import annotations

import argparse
from importlib import resources

import numpy as np

from itervision.io import write_text

IMAGENET200_SEED = 20260805


def imagenet1k_synsets() -> list[str]:
    text = resources.files("timm").joinpath("data/_info/imagenet_synsets.txt").read_text()
    synsets = sorted(line.strip() for line in text.splitlines() if line.strip())
    assert len(synsets) == 1000, len(synsets)
    return synsets


def draw_synsets(n: int, seed: int) -> list[str]:
    synsets = imagenet1k_synsets()
    picked = np.random.default_rng(seed).choice(len(synsets), size=n, replace=False)
    return sorted(synsets[i] for i in picked)


def render(n: int, seed: int) -> str:
    header = (f"# {n} ImageNet-1K synsets drawn with seed {seed}: "
              f"python -m itervision.data.class_lists --n {n} --seed {seed}. Not document 003's own random "
              f"draw (kept in its code repository): point subset.imagenet.imagenet200.class_list at that list to "
              f"use it\n")
    return header + "\n".join(draw_synsets(n, seed)) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=IMAGENET200_SEED)
    ap.add_argument("--out", help="file to write (default: stdout)")
    args = ap.parse_args(argv)
    text = render(args.n, args.seed)
    if args.out:
        write_text(args.out, text)
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
