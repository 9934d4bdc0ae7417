"""`make imagenet-lists IMAGENET=/path`: the listing of the ImageNet files each ImageNet subset of params.yaml
uses (data/source_list.py), written where its `data.sources` entry points (the subset stage's DVC dependency).

    python -m itervision.pipeline.imagenet_lists /data/imagenet [--params params.yaml]
"""
from __future__ import annotations

import sys
from pathlib import Path

from itervision.data.source_list import write_listing
from itervision.errors import ArgumentParser, UserError, cli_entry


def write_params_listings(imagenet: str | Path, params: str = "params.yaml") -> list[str]:
    """One listing per ImageNet subset whose data.sources entry names a listing (.csv), each for its own class
    list; a line per file written."""
    from itervision.config.params import load_params

    p = load_params(params)
    targets = {ds: p.data.sources[ds] for ds in p.subset.imagenet if str(p.data.sources.get(ds, "")).endswith(".csv")}
    if not targets:
        raise UserError(f"{params} has no ImageNet subset read from a listing (subset.imagenet with data.sources "
                        f"DATASET.csv); switch to the paper scale first (`make paper-scale`)")
    lines = []
    for ds, out in targets.items():
        n = write_listing(imagenet, [p.subset.imagenet[ds].class_list], out)
        lines.append(f"{out}: {n} images of {imagenet} ({ds}, class list {p.subset.imagenet[ds].class_list})")
    return lines


@cli_entry
def main(argv=None):
    ap = ArgumentParser(prog="python -m itervision.pipeline.imagenet_lists", description=__doc__.split("\n\n")[0])
    ap.add_argument("root", help="the ImageNet folder (train/<synset>/, val/<synset>/)")
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args(argv)
    for line in write_params_listings(args.root, args.params):
        print(line, file=sys.stderr)


if __name__ == "__main__":
    main()
