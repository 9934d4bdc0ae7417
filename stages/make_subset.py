"""DVC stage: prepare one dataset under data/prepared/<dataset>/ from the folder data.sources.<dataset> names
(that folder is the stage's dependency: a changed source file reruns it).

Array datasets (params subset.torchvision.<name>): per-class train/calib/test counts -> .npz + manifest.json.
ImageNet subsets (params subset.imagenet.<name>): class list, short side, hold-out -> tar shards + index.csv
(the source: a listing of the ImageNet files used, `make imagenet-lists`, or the folder itself).
Both are written into a temporary folder renamed into place at the end: a failure leaves nothing that looks
complete.
"""
import argparse

from itervision.data.subset import subset_imagenet, subset_torchvision
from itervision.errors import ArgumentParser, UserError, cli_entry
from itervision.layout import prepared_dir
from itervision.names import name_arg
from itervision.config.params import load_params


@cli_entry
def main(argv=None):
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True, type=name_arg, help="a name under data.sources")
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args(argv)
    p = load_params(args.params)
    if args.dataset not in p.data.sources:
        raise UserError(f"dataset '{args.dataset}' is not under data.sources in {args.params}; add it with the folder "
                        f"its files are read from")
    out, source = prepared_dir(args.dataset), p.data.sources[args.dataset]
    if args.dataset in p.subset.torchvision:
        spec = p.subset.torchvision[args.dataset]
        m = subset_torchvision(args.dataset, out, classes=spec.classes, train_per_class=spec.train_per_class,
                               calib_per_class=spec.calib_per_class, test_per_class=spec.test_per_class,
                               seed=p.subset.seed, root=source, verify=p.subset.verify_checksums)
        counts = {s: v["count"] for s, v in m["splits"].items()}
        print(f"{args.dataset}: {len(m['classes'])} classes, {counts} -> {out}")
    else:
        spec = p.subset.imagenet[args.dataset]
        s = subset_imagenet(source, spec.class_list, out, holdout_per_class=spec.holdout_per_class,
                            calib_per_class=spec.calib_per_class, seed=p.subset.seed, short_side=spec.short_side,
                            max_bad_fraction=p.subset.max_bad_fraction, workers=p.subset.workers,
                            images_per_shard=p.subset.images_per_shard)
        print(f"{args.dataset}: {len(s['classes'])} classes, {s['totals']}, {len(s['bad_images'])} bad -> {out}")


if __name__ == "__main__":
    main()
