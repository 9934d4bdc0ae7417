"""DVC stage: prepare one dataset subset under data/prepared/<dataset>/.

Torchvision datasets (params subset.torchvision.<name>): per-class train/calib/test counts -> .npz + manifest.
ImageNet subsets (params subset.imagenet.<name>): class list, short side, hold-out -> image tree + manifest.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from itervision.data.subset import subset_imagenet, subset_torchvision  # noqa: E402
from itervision.errors import UserError, cli_entry  # noqa: E402
from itervision.params import get, load_params  # noqa: E402
from itervision.pipeline import prepared_dir  # noqa: E402


@cli_entry
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True, help="a name under subset.torchvision or subset.imagenet")
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args(argv)
    params = load_params(args.params)
    tv = get(params, "subset.torchvision", dict) or {}
    inet = (params.get("subset") or {}).get("imagenet") or {}
    out = prepared_dir(args.dataset)
    if args.dataset in tv:
        spec = tv[args.dataset]
        m = subset_torchvision(
            args.dataset, out, classes=spec.get("classes", "all"), train_per_class=spec["train_per_class"],
            calib_per_class=spec["calib_per_class"], test_per_class=spec["test_per_class"],
            seed=get(params, "subset.seed", int), root=(get(params, "data.roots", dict) or {}).get(args.dataset),
            cache_root=get(params, "data.cache_root", str), download=bool(get(params, "data.download")))
        counts = {s: v["count"] for s, v in m["splits"].items()}
        print(f"{args.dataset}: {len(m['classes'])} classes, {counts} -> {out}")
    elif args.dataset in inet:
        spec = inet[args.dataset]
        root = (get(params, "data.roots", dict) or {}).get("imagenet")
        if not root:
            raise UserError("data.roots.imagenet is not set; point it at the ImageNet-1K folder with train/ and val/")
        s = subset_imagenet(root, spec["class_list"], out, holdout_per_class=spec["holdout_per_class"],
                            calib_per_class=spec.get("calib_per_class", 0), seed=get(params, "subset.seed", int),
                            short_side=spec.get("short_side"),
                            max_bad_fraction=get(params, "subset.max_bad_fraction", (int, float)),
                            workers=get(params, "subset.workers", int))
        print(f"{args.dataset}: {len(s['classes'])} classes, {s['totals']}, {len(s['bad_images'])} bad -> {out}")
    else:
        raise UserError(f"dataset '{args.dataset}' has no entry under subset.torchvision or subset.imagenet in "
                        f"{args.params}; add one")


if __name__ == "__main__":
    main()
