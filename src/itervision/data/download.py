"""Fetch a torchvision dataset's files into a folder that `data.sources.<dataset>` can name:

    python -m itervision.data.download cifar10 data/raw/cifar10

The only place that downloads: the pipeline itself never does (a run must not depend on the network, and the
folder is a DVC dependency that has to exist before `dvc repro`)."""
from __future__ import annotations

import argparse
from pathlib import Path

from itervision.data.registry import DATASETS, facts
from itervision.data.sources import locate
from itervision.errors import ArgumentParser, UserError, cli_entry


def download(name: str, folder: str | Path) -> Path:
    from torchvision import datasets

    info = facts(name)
    if info.source != "torchvision":
        raise UserError(f"{name} is an ImageNet subset: point data.sources.{name} at an ImageNet-1K folder instead")
    cls = getattr(datasets, info.torchvision_class)
    try:
        for train in (True, False):
            cls(str(folder), train=train, download=True)
    except Exception as err:  # network errors come in many types
        raise UserError(f"{name}: download into {folder} failed ({type(err).__name__}); fetch the files by hand "
                        f"into that folder") from None
    return locate(name, folder)


@cli_entry
def main(argv=None):
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", choices=[n for n, f in DATASETS.items() if f.source == "torchvision"])
    ap.add_argument("folder")
    args = ap.parse_args(argv)
    print(f"{args.dataset}: files in {download(args.dataset, args.folder)}; set data.sources.{args.dataset}: "
          f"{args.folder}")


if __name__ == "__main__":
    main()
