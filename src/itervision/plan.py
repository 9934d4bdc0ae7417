"""The plan of a scale before anything trains: structure, data roots, and what the campaign will cost.

* structure: every class list, dataset entry, model and size exists and builds;
* data roots: each source dataset is found (a warning, not an error: the plan is for budgeting);
* cost: per planned run, training FLOPs = FLOPs per image x 3 (forward and backward) x images per epoch x
  epochs, and GPU-hours on an RTX 4090, an A100 and an H100 at one utilisation, calibrated so that the
  document's recurrent SparseFormer run (ImageNet-200, 200 epochs, 2 RTX 4090s) takes its published 4.8 h;
* memory: peak training memory per process at the planned per-process batch, extrapolated from what the
  forward pass saves for backward at two small batches on the CPU (under the planned autocast), plus
  weights, gradients, AdamW moments, EMA and a fixed allowance for the CUDA context; runs that would not fit
  in 24 GB (RTX 4090) or 80 GB (A100/H100) are flagged.
FLOPs count 2 per multiply-add here (GPU peak figures do); fvcore's convention (1 per multiply-add) is used only
where the published GFLOPs are compared.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from itervision.data.registry import DATASETS
from itervision.errors import UserError
from itervision.params import STUDIES, Params, model_config, train_config
from itervision.pipeline import dataset_shape, expected_runs, study_models

# dense bf16 tensor throughput with fp32 accumulation, vendor figures (TFLOP/s)
GPUS = {"RTX 4090": (165.2, 24), "A100": (312.0, 80), "H100": (989.0, 80)}
CALIBRATION = {"gpu": "RTX 4090", "gpus": 2, "hours": 4.8, "model": "sf-recurrent", "dataset": "imagenet200",
               "epochs": 200}
CUDA_CONTEXT_GB = 1.0


@dataclass
class ModelPlan:
    study: str
    model: str
    dataset: str
    runs: int
    epochs: int
    train_images: int
    gflops: float            # multiply-adds per image (forward, every exit), complete count
    batch: int               # per process
    world: int
    memory_gb: float | None = None

    @property
    def train_flops(self) -> float:
        return 2 * self.gflops * 1e9 * 3 * self.train_images * self.epochs * self.runs


def train_images(p: Params, dataset: str) -> int:
    """Images per epoch: the prepared split when it exists, else the source size less the hold-outs."""
    for name in ("manifest.json", "summary.json"):
        f = Path("data/prepared") / dataset / name
        if f.exists():
            data = json.loads(f.read_text())
            return int(data["splits"]["train"]["count"] if name == "manifest.json" else data["totals"]["train"])
    classes, _ = dataset_shape(p, dataset)
    if dataset in p.subset.imagenet:
        spec = p.subset.imagenet[dataset]
        total = DATASETS[dataset].train_images if dataset in DATASETS else 1300 * classes
        return total - classes * (spec.holdout_per_class + spec.calib_per_class)
    spec = p.subset.torchvision[dataset]
    total = DATASETS[dataset].train_images
    if spec.train_per_class != "all":
        return classes * spec.train_per_class
    return total - classes * spec.calib_per_class


def world_size(launcher: str) -> int:
    parts = launcher.replace("=", " ").split()
    nodes = int(parts[parts.index("--nnodes") + 1]) if "--nnodes" in parts else 1
    per_node = int(parts[parts.index("--nproc_per_node") + 1]) if "--nproc_per_node" in parts else 1
    return nodes * per_node


def check_structure(p: Params) -> list[str]:
    from itervision.data.class_lists import imagenet1k_synsets
    from itervision.data.sources import read_class_list

    lines, synsets = [], set(imagenet1k_synsets())
    expected = {"imagenet100": 100, "imagenet200": 200}
    for name, spec in p.subset.imagenet.items():
        classes = read_class_list(spec.class_list)
        if name in expected and len(classes) != expected[name]:
            raise UserError(f"{spec.class_list} has {len(classes)} classes, {name} needs {expected[name]}")
        unknown = [c for c in classes if c not in synsets]
        if unknown:
            raise UserError(f"{spec.class_list} lists {unknown[0]}, not an ImageNet-1K synset")
        lines.append(f"class list {spec.class_list}: {len(classes)} synsets, all in ImageNet-1K; short side "
                     f"{spec.short_side or 'full'}, hold-out {spec.holdout_per_class}/class")
    for study in STUDIES:
        runs = expected_runs(p, study)
        lines.append(f"{study}: {len(runs)} runs ({len(study_models(p, study))} (dataset, model) pairs x seeds)")
    return lines


def check_roots(p: Params) -> list[str]:
    """A warning per source dataset that cannot be found (no download is attempted)."""
    from itervision.data.sources import locate

    out = []
    for ds in p.subset.datasets:
        if ds in p.subset.imagenet:
            root = p.data.roots.get("imagenet")
            if not root or not (Path(root) / "train").is_dir():
                out.append(f"warning: data.roots.imagenet is {'not set' if not root else root + ' without train/'}; "
                           f"{ds} cannot be prepared until it points at ImageNet-1K (train/<synset>/, val/<synset>/)")
            continue
        try:
            locate(ds, p.data.roots.get(ds), p.data.cache_root, download=False)
        except UserError as err:
            more = " (data.download is true: it will be downloaded)" if p.data.download else ""
            out.append(f"warning: {str(err).split(':')[0]}{more}; set data.roots.{ds}")
    return out


def model_gflops(cfg: dict, classes: int, chans: int, cache: dict, fast: bool = False) -> float:
    """Multiply-adds per image of the whole forward (every exit), complete count, cached per config; with
    fast=True NaN for models that only fvcore can count (SparseFormer)."""
    key = json.dumps([cfg, classes, chans], sort_keys=True)
    if fast and cfg["family"] == "sparseformer":
        return float("nan")
    if key not in cache:
        import torch

        from itervision.evaluation import accounting
        from itervision.evaluation.flops import count_flops
        from itervision.models.registry import build_config, build_model

        if cfg["family"] == "recursive":
            cache[key] = accounting.macs_per_step(build_config(cfg, classes, chans))[-1] / 1e9
        elif cfg["family"] == "encoder":
            cache[key] = accounting.encoder_only_macs(build_config(cfg, classes, chans)) / 1e9
        else:
            model = build_model(cfg, classes, chans)
            img = torch.zeros(1, chans, cfg["img_size"], cfg["img_size"])
            cache[key] = count_flops(model, img, -1, complete=True)["flops"] / 1e9
    return cache[key]


def memory_gb(cfg: dict, classes: int, chans: int, train: dict, cache: dict) -> float:
    """Peak training memory of one process at train.batch_size (GB), see the module docstring."""
    key = json.dumps([cfg, classes, chans, train["batch_size"], train["amp"], train["ema"]], sort_keys=True)
    if key in cache:
        return cache[key]
    import torch

    from itervision.models.registry import build_model

    torch.manual_seed(0)
    model = build_model(cfg, classes, chans).train()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.bfloat16}.get(train["amp"])

    def saved_bytes(batch: int) -> int:
        seen, total = set(), 0

        def pack(t):
            nonlocal total
            storage = t.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
            return t

        img = torch.randn(batch, chans, cfg["img_size"], cfg["img_size"])
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
                torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            out = model(img)
            sum(lg.float().sum() for lg in out["logits"])
        return total

    small, large = saved_bytes(2), saved_bytes(4)
    per_image = max(0.0, (large - small) / 2)
    params = sum(p.numel() for p in model.parameters())
    states = params * 4 * (1 + 1 + 2 + (1 if train["ema"] else 0)) + (params * 2 if dtype else 0)
    fixed = max(0.0, small - 2 * per_image)
    cache[key] = (states + fixed + per_image * train["batch_size"]) / 1e9 + CUDA_CONTEXT_GB
    return cache[key]


def plan_runs(p: Params, memory: bool = True, fast: bool = False) -> list[ModelPlan]:
    world = world_size(p.run.launcher)
    gcache, mcache, out = {}, {}, []
    for study in STUDIES:
        runs = expected_runs(p, study)
        for ds, m in study_models(p, study):
            cfg, train = model_config(p, m, ds), train_config(p, ds, study)
            classes, chans = dataset_shape(p, ds)
            n = sum(1 for r in runs if (r.dataset, r.model) == (ds, m))
            mp = ModelPlan(study, m, ds, n, train["epochs"], train_images(p, ds),
                           model_gflops(cfg, classes, chans, gcache, fast),
                           train["batch_size"], world)
            if train["steps_per_epoch"]:
                mp.train_images = min(mp.train_images, train["steps_per_epoch"] * train["batch_size"] * world)
            if memory:
                mp.memory_gb = memory_gb(cfg, classes, chans, train, mcache)
            out.append(mp)
    return out


PUBLISHED_CALIBRATION_GMAC = 1.054  # the document's fvcore count of the recurrent model, ImageNet-200


def utilisation(plans: list[ModelPlan], fast: bool = False) -> float:
    """The fraction of peak that reproduces the document's 4.8 h (see CALIBRATION): from the planned
    recurrent ImageNet-200 model's FLOPs per image, else the paper scale's, else (fast mode) the published
    fvcore count, which leaves out the adaptive mixing."""
    c = CALIBRATION
    match = [mp for mp in plans if (mp.model, mp.dataset) == (c["model"], c["dataset"])]
    if fast:
        gflops = PUBLISHED_CALIBRATION_GMAC
        images = match[0].train_images if match else DATASETS[c["dataset"]].train_images - 200 * 20
    elif match:
        gflops, images = match[0].gflops, match[0].train_images
    else:
        from itervision.params import check_params
        from itervision.scales import render_scale

        paper = check_params(render_scale("paper"))
        classes, chans = dataset_shape(paper, c["dataset"])
        gflops = model_gflops(model_config(paper, c["model"], c["dataset"]), classes, chans, {})
        images = train_images(paper, c["dataset"])
    flops = 2 * gflops * 1e9 * 3 * images * c["epochs"]
    return flops / (GPUS[c["gpu"]][0] * 1e12 * c["gpus"] * c["hours"] * 3600)


def cost_table(plans: list[ModelPlan], fast: bool = False) -> list[str]:
    u = utilisation(plans, fast)
    lines = [f"utilisation {100 * u:.1f}% of dense bf16 peak, calibrated on the document's {CALIBRATION['hours']} h "
             f"for {CALIBRATION['model']} on {CALIBRATION['dataset']}, {CALIBRATION['epochs']} epochs, "
             f"{CALIBRATION['gpus']} x {CALIBRATION['gpu']}",
             f"{'study':12s} {'model':18s} {'dataset':13s} {'runs':>4s} {'ep':>4s} {'img/ep':>8s} {'GMAC/img':>9s} "
             f"{'PFLOP':>9s} " + " ".join(f"{g + ' h':>10s}" for g in GPUS) + f" {'GB/proc':>8s}  fits"]
    totals, uncounted = {}, set()
    for mp in plans:
        hours = [mp.train_flops / (GPUS[g][0] * 1e12 * u) / 3600 for g in GPUS]
        fits = "—" if mp.memory_gb is None else (
            "24 GB and 80 GB" if mp.memory_gb <= 24 else "80 GB only" if mp.memory_gb <= 80 else "NEITHER")
        mem = "—" if mp.memory_gb is None else f"{mp.memory_gb:.1f}"
        counted = not math.isnan(mp.gflops)  # fast mode: SparseFormer FLOPs need fvcore
        cost = (f"{mp.gflops:9.3f} {mp.train_flops / 1e15:9.1f} " + " ".join(f"{h:10.1f}" for h in hours)
                if counted else f"{'—':>9s} {'—':>9s} " + " ".join(f"{'—':>10s}" for _ in hours))
        lines.append(f"{mp.study:12s} {mp.model:18s} {mp.dataset:13s} {mp.runs:4d} {mp.epochs:4d} "
                     f"{mp.train_images:8d} {cost} {mem:>8s}  {fits}")
        if not counted:
            uncounted.add(f"{mp.model} on {mp.dataset}")
            continue
        for key in (("study", mp.study), ("dataset", mp.dataset), ("all", "")):
            t = totals.setdefault(key, [0.0] * len(GPUS))
            totals[key] = [a + b for a, b in zip(t, hours)]
    for kind in ("study", "dataset", "all"):
        lines.append(f"GPU-hours (one GPU, every run) {'of the whole campaign' if kind == 'all' else 'by ' + kind}: "
                     + "; ".join(f"{k[1] + ': ' if k[1] else ''}" + ", ".join(f"{g} {h:,.0f}" for g, h in zip(GPUS, v))
                                 for k, v in totals.items() if k[0] == kind))
    if uncounted:
        lines.append(f"not in these totals (fast mode counts no fvcore FLOPs; run without --fast): "
                     f"{len(uncounted)} (model, dataset) pairs, e.g. {sorted(uncounted)[0]}")
    return lines


def published_check(p: Params) -> list[str]:
    """GFLOPs per exit of every SparseFormer (dataset, model) beside the published ones (fvcore convention)."""
    import torch

    from itervision.evaluation.flops import count_flops
    from itervision.models.registry import build_model
    from itervision.reporting.tables import load_reference

    ref = load_reference(Path("data/reference/sparseformer.csv"))
    lines = []
    for ds, m in study_models(p, "sparseformer"):
        cfg = model_config(p, m, ds)
        classes, chans = dataset_shape(p, ds)
        model = build_model(cfg, classes, chans)
        img = torch.zeros(1, chans, cfg["img_size"], cfg["img_size"])
        ours = [count_flops(model, img, e)["flops"] / 1e9 for e in range(model.num_exits)]
        if len(cfg["rounds"]) == 1:
            pub = [ref.get((ds, f"static-{cfg['rounds'][0]}", "gflops"))]
        else:
            prefix = "recurrent" if cfg["memory"] else "no-memory"
            pub = [ref.get((ds, f"{prefix} exit {e + 1}", "gflops")) for e in range(len(ours))]
        shown = " / ".join(f"{g:.3f}" for g in ours)
        pubs = " / ".join("—" if v is None else f"{v:.3f}" for v in pub)
        lines.append(f"  {m:20s} {ds:12s} GFLOPs {shown}  published {pubs}")
    return lines

