"""DVC stage: prepare one dataset under data/prepared/<dataset>/.

Array datasets (params subset.torchvision.<name>): per-class train/calib/test counts -> .npz + manifest.json.
ImageNet subsets (params subset.imagenet.<name>): class list, short side, hold-out -> image tree + manifest.
Both are written into a temporary folder renamed into place at the end: a failure leaves nothing that looks
complete.
"""
import argparse

from itervision.data.subset import subset_imagenet, subset_torchvision
from itervision.errors import UserError, cli_entry
from itervision.params import load_params
from itervision.layout import prepared_dir


@cli_entry
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True, help="a name under subset.torchvision or subset.imagenet")
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args(argv)
    p = load_params(args.params)
    out = prepared_dir(args.dataset)
    if args.dataset in p.subset.torchvision:
        spec = p.subset.torchvision[args.dataset]
        m = subset_torchvision(args.dataset, out, classes=spec.classes, train_per_class=spec.train_per_class,
                               calib_per_class=spec.calib_per_class, test_per_class=spec.test_per_class,
                               seed=p.subset.seed, root=p.data.roots.get(args.dataset),
                               cache_root=p.data.cache_root, download=p.data.download)
        counts = {s: v["count"] for s, v in m["splits"].items()}
        print(f"{args.dataset}: {len(m['classes'])} classes, {counts} -> {out}")
    elif args.dataset in p.subset.imagenet:
        spec = p.subset.imagenet[args.dataset]
        root = p.data.roots.get("imagenet")
        if not root:
            raise UserError("data.roots.imagenet is not set; point it at the ImageNet-1K folder with train/ and val/")
        s = subset_imagenet(root, spec.class_list, out, holdout_per_class=spec.holdout_per_class,
                            calib_per_class=spec.calib_per_class, seed=p.subset.seed, short_side=spec.short_side,
                            max_bad_fraction=p.subset.max_bad_fraction, workers=p.subset.workers)
        print(f"{args.dataset}: {len(s['classes'])} classes, {s['totals']}, {len(s['bad_images'])} bad -> {out}")
    else:
        raise UserError(f"dataset '{args.dataset}' has no entry under subset.torchvision or subset.imagenet in "
                        f"{args.params}; add one")


if __name__ == "__main__":
    main()
