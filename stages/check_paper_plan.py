"""Check the paper-scale configuration without training: every class list, dataset entry, model and size
exists and builds; print the planned runs and each model's parameters and GFLOPs beside the published ones.

    python stages/check_paper_plan.py            # the paper overlay (configs/scales/paper.yaml)
    python stages/check_paper_plan.py --no-flops # structure only
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from itervision.data.class_lists import imagenet1k_synsets  # noqa: E402
from itervision.data.datasets import TORCHVISION_DATASETS, read_class_list  # noqa: E402
from itervision.errors import UserError, cli_entry  # noqa: E402
from itervision.inspect import inspect_model, published  # noqa: E402
from itervision.pipeline import STUDIES, expected_runs  # noqa: E402
from itervision.scales import render_scale  # noqa: E402

EXPECTED_CLASSES = {"imagenet100": 100, "imagenet200": 200}


def check(params: dict, flops: bool = True) -> list[str]:
    lines, synsets = [], set(imagenet1k_synsets())
    inet = params["subset"].get("imagenet") or {}
    for name, spec in inet.items():
        classes = read_class_list(spec["class_list"])
        if name in EXPECTED_CLASSES and len(classes) != EXPECTED_CLASSES[name]:
            raise UserError(f"{spec['class_list']} has {len(classes)} classes, {name} needs {EXPECTED_CLASSES[name]}")
        unknown = [c for c in classes if c not in synsets]
        if unknown:
            raise UserError(f"{spec['class_list']} lists {unknown[0]}, not an ImageNet-1K synset")
        lines.append(f"class list {spec['class_list']}: {len(classes)} synsets, all in ImageNet-1K; short side "
                     f"{spec.get('short_side') or 'full'}, hold-out {spec['holdout_per_class']}/class")
    for ds in params["subset"]["datasets"]:
        if ds not in inet and ds not in (params["subset"].get("torchvision") or {}):
            raise UserError(f"subset.datasets names {ds} without a subset entry")
        if ds not in inet and ds not in TORCHVISION_DATASETS:
            raise UserError(f"dataset {ds} is neither a torchvision dataset nor an imagenet subset")
    total = 0
    for study in STUDIES:
        runs = expected_runs(params, study)
        total += len(runs)
        for ds in set(r["dataset"] for r in runs):
            if ds not in params["subset"]["datasets"]:
                raise UserError(f"study {study} uses dataset {ds}, which subset.datasets does not prepare")
        lines.append(f"{study}: {len(runs)} runs ({len(set(r['model'] for r in runs))} models x datasets x seeds)")
        seen = set()
        for r in runs:
            key = (r["model"], r["dataset"])
            if key in seen:
                continue
            seen.add(key)
            rep = inspect_model(params, r["model"], r["dataset"], fvcore=flops)
            cfg = rep["config"]
            text = (f"  {r['model']:20s} {r['dataset']:13s} {cfg['img_size']:4d} px  "
                    f"{rep['stored_params'] / 1e6:6.2f}M stored {rep['active_params'] / 1e6:6.2f}M active")
            if flops and rep.get("gflops_per_exit"):
                pub = published(rep).get("gflops_per_exit") or []
                g = " / ".join(f"{v:.3f}" for v in rep["gflops_per_exit"][-3:] if rep["family"] == "sparseformer") \
                    or f"{rep['gflops_per_exit'][-1]:.3f} (last of {len(rep['gflops_per_exit'])} steps)"
                pubs = " / ".join(f"{v:.3f}" for v in pub if v) if any(pub) else "—"
                text += f"  GFLOPs {g}  published {pubs}"
            lines.append(text)
    lines.append(f"total: {total} training runs; launcher: {params['run']['launcher']}")
    return lines


@cli_entry
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", default="paper")
    ap.add_argument("--no-flops", action="store_true")
    args = ap.parse_args(argv)
    for line in check(render_scale(args.scale), flops=not args.no_flops):
        print(line)


if __name__ == "__main__":
    main()
