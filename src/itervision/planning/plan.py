"""The plan of a scale before anything trains: structure, data sources, and what the campaign will cost.

* structure: every class list, dataset entry, model and size exists and builds;
* data sources: each dataset's folder is found (a warning, not an error: the plan is for budgeting);
* cost, per planned (model, dataset): GPU-hours of its runs. Where a GPU benchmark of that GPU exists
  (benchmarks/results/<gpu>.json, written by `make gpu-benchmark`), from the measured training images/s of that
  configuration at the per-GPU batch (interpolated in log batch between measured batches, never extrapolated
  beyond a factor 2; the file and its date are named); where the recipe compiles the step (train.compile) and
  the benchmark measured that, the compiled rate plus the compile time once per run ('compiled' rows).
  Otherwise an *estimate* from FLOPs: training FLOPs = FLOPs per image x 3 (forward and backward) x images per
  epoch x epochs, at one utilisation of the GPU's peak, calibrated so that the document's recurrent
  SparseFormer run (ImageNet-200, 200 epochs, 2 RTX 4090s) takes its published 4.8 h. A FLOP model cannot
  see launch- or sync-bound code, so the measured rate wins wherever one exists, and the table says which one
  each row used;
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
from dataclasses import dataclass, field
from pathlib import Path

from itervision.data.registry import DATASETS
from itervision.errors import UserError
from itervision.config.matrix import dataset_shape, expected_runs, model_spec, study_models
from itervision.config.params import Params, model_config, train_config

# dense bf16 tensor throughput with fp32 accumulation, vendor figures (TFLOP/s), and memory (GB)
GPUS = {"RTX 4090": (165.2, 24), "A100": (312.0, 80), "H100": (989.0, 80)}
CALIBRATION = {"gpu": "RTX 4090", "gpus": 2, "hours": 4.8, "model": "sf-recurrent", "dataset": "imagenet200",
               "epochs": 200}
CUDA_CONTEXT_GB = 1.0
RESULTS = Path("benchmarks/results")
MAX_BATCH_STRETCH = 2.0  # a measured rate is used up to this factor away from the measured batches


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
    measured: dict = field(default_factory=dict)  # measured_rate() of a GPU benchmark entry
    input: dict = field(default_factory=dict)     # input_cap(): what the input path feeds a GPU

    @property
    def images_per_s(self) -> float | None:
        """The per-GPU training rate the plan counts: the measured GPU rate, capped by the input path's."""
        if not self.measured:
            return None
        cap = self.input.get("cap")
        return min(self.measured["images_per_s"], cap) if cap else self.measured["images_per_s"]

    @property
    def train_flops(self) -> float:
        return 2 * self.gflops * 1e9 * 3 * self.train_images * self.epochs * self.runs

    @property
    def measured_gpu_hours(self) -> float | None:
        """GPU-hours of every run at the measured per-GPU rate (world GPUs, each at `batch`); every GPU of a run
        compiles (at the same time), so the compile time counts world times."""
        if not self.measured:
            return None
        seconds = (self.train_images * self.epochs / self.images_per_s
                   + self.measured["compile_seconds"] * self.world)
        return seconds * self.runs / 3600


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
    for study in p.studies:
        runs = expected_runs(p, study)
        lines.append(f"{study}: {len(runs)} runs ({len(study_models(p, study))} (dataset, model) pairs x seeds)")
    return lines


def check_sources(p: Params) -> list[str]:
    """A warning per dataset whose source folder cannot be found (nothing is downloaded)."""
    from itervision.data.sources import locate

    out = []
    for ds, source in p.data.sources.items():
        if ds in p.subset.imagenet:
            if Path(source).suffix == ".csv" and not Path(source).is_file():
                out.append(f"warning: data.sources.{ds} = {source} does not exist; {ds} cannot be prepared until "
                           f"`make imagenet-lists IMAGENET=/path/to/imagenet` lists the files it uses")
            elif Path(source).suffix != ".csv" and not (Path(source) / "train").is_dir():
                out.append(f"warning: data.sources.{ds} = {source} has no train/ folder; {ds} cannot be prepared "
                           f"until it points at ImageNet-1K (train/<synset>/, val/<synset>/) or a listing of it")
            continue
        try:
            locate(ds, source)
        except UserError as err:
            out.append(f"warning: {str(err).split(';')[0]}")
    return out


def model_gflops(config, cache: dict, fast: bool = False) -> float:
    """Multiply-adds per image of the whole forward (every exit), complete count, cached per config; with
    fast=True NaN for models that only fvcore can count (SparseFormer)."""
    from itervision.models.registry import family_of

    family = family_of(config)
    key = repr(config)
    if fast and family == "sparseformer":
        return float("nan")
    if key not in cache:
        from itervision.evaluation import accounting

        if family == "recursive":
            cache[key] = accounting.macs_per_step(config)[-1] / 1e9
        elif family == "encoder":
            cache[key] = accounting.encoder_only_macs(config) / 1e9
        else:
            import torch

            from itervision.evaluation.flops import count_flops
            from itervision.models.registry import build_model

            img = torch.zeros(1, config.in_chans, config.img_size, config.img_size)
            cache[key] = count_flops(build_model(config), img, -1, complete=True)["flops"] / 1e9
    return cache[key]


def memory_gb(config, train, batch: int, cache: dict) -> float:
    """Peak training memory of one process at `batch` images per forward (GB), see the module docstring."""
    key = repr((config, batch, train.amp, train.ema))
    if key in cache:
        return cache[key]
    import torch

    from itervision.models.registry import build_model

    torch.manual_seed(0)
    model = build_model(config).train()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.bfloat16}.get(train.amp)

    def saved_bytes(n: int) -> int:
        seen, total = set(), 0

        def pack(t):
            nonlocal total
            storage = t.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
            return t

        img = torch.randn(n, config.in_chans, config.img_size, config.img_size)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
                torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            out = model(img)
            sum(lg.float().sum() for lg in out["logits"])
        return total

    small, large = saved_bytes(2), saved_bytes(4)
    per_image = max(0.0, (large - small) / 2)
    params = sum(p.numel() for p in model.parameters())
    states = params * 4 * (1 + 1 + 2 + (1 if train.ema else 0)) + (params * 2 if dtype else 0)
    fixed = max(0.0, small - 2 * per_image)
    cache[key] = (states + fixed + per_image * batch) / 1e9 + CUDA_CONTEXT_GB
    return cache[key]


# ------------------------------------------------------------------------------------------ the input

INPUT_RATES = RESULTS / "input.json"


def read_results(path: Path, key: str, fix: str) -> dict | None:
    """A benchmark results file holding the mapping `key`, with its path added; None when absent; a broken file is
    one line naming `fix`."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        raise UserError(f"{path} is not valid JSON; rerun {fix}") from None
    if not isinstance(data, dict) or not isinstance(data.get(key), dict):
        raise UserError(f"{path} lacks '{key}'; rerun {fix}")
    data["path"] = str(path)
    return data


def load_input_rates(path: Path = INPUT_RATES) -> dict | None:
    """benchmarks/results/input.json (`make input-benchmark`): images per core-second of each data path."""
    return read_results(path, "per_core", "`make input-benchmark`")


def input_path(train, imagenet: bool) -> str:
    """Which CPU work feeds a run's GPU: ImageNet host (decode and timm transforms in loader workers) or device
    (workers read JPEG bytes; the GPU decodes and augments); arrays host (PIL RandAugment per image in the
    training process itself) or in memory (nothing per image on the CPU)."""
    if imagenet:
        return "host" if train.augment_on == "host" else "device_read"
    return "host" if train.randaugment and train.augment_on == "host" else "memory"


def input_cap(dataset: str, train, imagenet: bool, inputs: dict, cpus_per_gpu: float, measured: dict) -> dict:
    """What the input path can feed one GPU: per-core rate x cores per GPU for ImageNet (one loader worker per core:
    train.workers is a hardware knob, set to the cores a GPU has); the training process's own core for arrays on
    the host path (cores do not help there); no cap for arrays in memory. `bound` when that is below the GPU's
    measured rate, with the cores per GPU that would unbind it."""
    path = input_path(train, imagenet)
    if path == "memory":
        return {"path": path}
    per_core = (inputs["per_core"].get(dataset) or {}).get(path)
    if not per_core:
        return {"path": path, "unmeasured": True}
    cores = cpus_per_gpu if imagenet else 1
    cap = per_core * cores
    gpu = measured.get("images_per_s") if measured else None
    out = {"path": path, "per_core": per_core, "cores": cores, "cap": cap}
    if gpu:
        out.update(bound=cap < gpu, gpu=gpu, cores_needed=math.ceil(gpu / per_core) if imagenet else None)
    return out


def input_lines(plans: list[ModelPlan], inputs: dict | None, cpus_per_gpu: float | None) -> list[str]:
    """What the input can feed, and the runs it cannot, at CPUS_PER_GPU cores per GPU."""
    if not cpus_per_gpu:
        return ["input: not counted (CPUS_PER_GPU=N counts it: per-core rates from `make input-benchmark`)"]
    if not inputs:
        return [f"input: CPUS_PER_GPU={cpus_per_gpu:g} given but no benchmarks/results/input.json; run `make "
                f"input-benchmark` first"]
    lines = [f"input at {cpus_per_gpu:g} cores per GPU (per-core rates measured on {inputs.get('cpu')}, "
             f"{inputs.get('date')}; other CPUs differ): the run's rate is the lower of GPU and input"]
    bound = [mp for mp in plans if mp.input.get("bound")]
    for mp in bound:
        i = mp.input
        need = f"; {i['cores_needed']} cores per GPU would feed it" if i.get("cores_needed") else \
            " (one process per GPU: cores do not help; train.augment_on: device does)"
        lines.append(f"  INPUT-BOUND {mp.model} on {mp.dataset} ({i['path']} path): GPU {i['gpu']:,.0f} img/s, input "
                     f"{i['cap']:,.0f} img/s per GPU{need}")
    if not bound:
        lines.append("  no run is input-bound at its measured GPU rate")
    device = sorted({mp.dataset for mp in plans if mp.input.get("path") == "device_read"})
    if device:
        lines.append(f"  device path ({', '.join(device)}): the loader only reads bytes; the GPU's own decode and "
                     f"augmentation time is in no measured rate here (loader-fed rates: `make gpu-benchmark` on a GPU)")
    return lines


# ------------------------------------------------------------------------------------------ measured rates

def load_rates(gpu: str, results: Path = RESULTS) -> dict | None:
    """benchmarks/results/<gpu>.json (gpu as the file names it, e.g. nvidia-h200, or a path to such a file), or
    None."""
    path = Path(gpu) if gpu.endswith(".json") else Path(results) / f"{gpu}.json"
    return read_results(path, "configs", "`make gpu-benchmark` on that GPU")


def rate_at(entry: dict, batch: int) -> tuple[float, int] | None:
    """(training images/s, batch it came from) at a per-GPU batch, from a benchmark entry's measured batches:
    interpolated linearly in log batch between two measured batches, or the nearest within a factor of
    MAX_BATCH_STRETCH (never further)."""
    from itervision.planning.placement import log_interpolate

    points = sorted((int(b), float(v)) for b, v in (entry.get("train_images_per_s") or {}).items()
                    if v and math.isfinite(float(v)))
    if not points:
        return None
    between = log_interpolate(points, batch)
    if between is not None:
        return between, batch
    nearest = min(points, key=lambda bv: abs(math.log(bv[0] / batch)))
    if abs(math.log(nearest[0] / batch)) <= math.log(MAX_BATCH_STRETCH):
        return nearest[1], nearest[0]
    return None


def measured_rate(entry: dict, batch: int, compile_mode: str) -> dict:
    """{"images_per_s", "batch", "compiled", "compile_seconds"} of a benchmark entry at a per-GPU batch: the
    compiled rate when the recipe compiles and it was measured at that batch (its compile time paid once per
    run), else the eager rate; {} when neither covers the batch."""
    compiled = entry.get("compiled") or {}
    if compile_mode != "none" and compiled.get("mode") == compile_mode and compiled.get("batch") == batch:
        return {"images_per_s": compiled["train_images_per_s"], "batch": batch, "compiled": True,
                "compile_seconds": compiled["compile_seconds"]}
    found = rate_at(entry, batch)
    return {"images_per_s": found[0], "batch": found[1], "compiled": False, "compile_seconds": 0.0} if found else {}


def plan_runs(p: Params, memory: bool = True, fast: bool = False, rates: dict | None = None,
              inputs: dict | None = None, cpus_per_gpu: float | None = None) -> list[ModelPlan]:
    gcache, mcache, out = {}, {}, []
    for study in p.studies:
        runs = expected_runs(p, study)
        for ds, m in study_models(p, study):
            spec, train, world = model_spec(p, m, ds), train_config(p, ds, study), p.run.world(ds, m)
            batch = train.batching(world).per_process
            n = sum(1 for r in runs if (r.dataset, r.model) == (ds, m))
            mp = ModelPlan(study, m, ds, n, train.epochs, train_images(p, ds), model_gflops(spec.config, gcache, fast),
                           batch, world)
            if train.steps_per_epoch:
                mp.train_images = min(mp.train_images, train.steps_per_epoch * train.global_batch)
            if memory:
                mp.memory_gb = memory_gb(spec.config, train, batch, mcache)
            entry = (rates or {}).get("configs", {}).get(f"{study}/{ds}/{m}")
            mp.measured = measured_rate(entry, batch, train.compile) if entry else {}
            if mp.measured and not mp.measured["compiled"] and train.compile != "none":
                mp.measured = compiled_elsewhere(mp.measured, rates, study, m, batch, train.compile)
            if inputs and cpus_per_gpu:
                mp.input = input_cap(ds, train, ds in p.subset.imagenet, inputs, cpus_per_gpu, mp.measured)
            out.append(mp)
    return out


def compiled_elsewhere(eager: dict, rates: dict, study: str, model: str, batch: int, mode: str) -> dict:
    """The eager rate × the compile speed-up the same model measured on another dataset at the same batch and mode
    (the same architecture: the datasets differ in classes and channels only), its compile time paid once per
    run; the eager rate when no dataset has one."""
    for key, entry in sorted(rates.get("configs", {}).items()):
        compiled = entry.get("compiled") or {}
        if (key.startswith(f"{study}/") and key.endswith(f"/{model}") and compiled.get("mode") == mode
                and compiled.get("batch") == batch == eager["batch"] and compiled.get("speedup")):
            return {**eager, "images_per_s": eager["images_per_s"] * compiled["speedup"], "compiled": True,
                    "compile_seconds": compiled["compile_seconds"], "speedup_from": key.split("/")[1]}
    return eager


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
        from itervision.config.params import check_params
        from itervision.config.scales import render_scale

        paper = check_params(render_scale("paper"))
        gflops = model_gflops(model_spec(paper, c["model"], c["dataset"]).config, {})
        images = train_images(paper, c["dataset"])
    flops = 2 * gflops * 1e9 * 3 * images * c["epochs"]
    return flops / (GPUS[c["gpu"]][0] * 1e12 * c["gpus"] * c["hours"] * 3600)


def estimate_hours(mp: ModelPlan, u: float) -> list[float]:
    """FLOP-model GPU-hours of a (model, dataset)'s runs on each GPU of GPUS."""
    return [mp.train_flops / (GPUS[g][0] * 1e12 * u) / 3600 for g in GPUS]


def basis(mp: ModelPlan) -> str:
    if not mp.measured:
        return "estimate"
    if mp.measured.get("speedup_from"):
        return "compiled~"  # eager here x the speed-up measured compiled on another dataset
    return "compiled" if mp.measured["compiled"] else "measured"


def cost_table(plans: list[ModelPlan], fast: bool = False, rates: dict | None = None) -> list[str]:
    u = utilisation(plans, fast)
    lines = [f"FLOP estimate: utilisation {100 * u:.1f}% of dense bf16 peak, calibrated on the document's "
             f"{CALIBRATION['hours']} h for {CALIBRATION['model']} on {CALIBRATION['dataset']}, "
             f"{CALIBRATION['epochs']} epochs, {CALIBRATION['gpus']} x {CALIBRATION['gpu']}"]
    if rates:
        lines.append(f"measured: {rates['gpu']} rates from {rates['path']} ({rates.get('date', 'undated')}, "
                     f"{rates.get('source', 'make gpu-benchmark')}): used for every row marked 'measured' (eager), "
                     f"'compiled' (compiled, measured) or 'compiled~' (eager x the compile speed-up of the same model "
                     f"on another dataset)")
    gpu_col = f"{rates['gpu']} h" if rates else "measured h"
    lines.append(f"{'study':12s} {'model':18s} {'dataset':13s} {'runs':>4s} {'ep':>4s} {'img/ep':>8s} {'batch':>5s} "
                 f"{'GMAC/img':>9s} " + " ".join(f"{g + ' h':>10s}" for g in GPUS) + f" {gpu_col:>16s} {'basis':>9s} "
                 f"{'GB/proc':>8s}  fits")
    totals, uncounted = {}, set()
    for mp in plans:
        counted = not math.isnan(mp.gflops)  # fast mode: SparseFormer FLOPs need fvcore
        hours = estimate_hours(mp, u) if counted else [float("nan")] * len(GPUS)
        measured = mp.measured_gpu_hours
        fits = "—" if mp.memory_gb is None else (
            "24 GB and 80 GB" if mp.memory_gb <= 24 else "80 GB only" if mp.memory_gb <= 80 else "NEITHER")
        mem = "—" if mp.memory_gb is None else f"{mp.memory_gb:.1f}"
        est = " ".join(f"{h:10.1f}" if counted else f"{'—':>10s}" for h in hours)
        lines.append(f"{mp.study:12s} {mp.model:18s} {mp.dataset:13s} {mp.runs:4d} {mp.epochs:4d} "
                     f"{mp.train_images:8d} {mp.batch:5d} {mp.gflops if counted else float('nan'):9.3f} {est} "
                     f"{'—' if measured is None else f'{measured:.1f}':>16s} "
                     f"{basis(mp):>9s} {mem:>8s}  {fits}")
        if not counted:
            uncounted.add(f"{mp.model} on {mp.dataset}")
        for key in (("study", mp.study), ("dataset", mp.dataset), ("all", "")):
            t = totals.setdefault(key, {"estimate": [0.0] * len(GPUS), "measured": 0.0, "unmeasured": 0})
            if counted:
                t["estimate"] = [a + b for a, b in zip(t["estimate"], hours)]
            if measured is not None:
                t["measured"] += measured
            else:
                t["unmeasured"] += 1
    for kind in ("study", "dataset", "all"):
        parts = []
        for k, t in totals.items():
            if k[0] != kind:
                continue
            text = ", ".join(f"{g} {h:,.0f}" for g, h in zip(GPUS, t["estimate"]))
            if rates:
                text += f"; {rates['gpu']} measured {t['measured']:,.0f}" + (
                    f" (+{t['unmeasured']} rows without a measured rate)" if t["unmeasured"] else "")
            parts.append(f"{k[1] + ': ' if k[1] else ''}{text}")
        lines.append(f"GPU-hours (one GPU, every run) {'of the whole campaign' if kind == 'all' else 'by ' + kind} "
                     f"[FLOP estimate per GPU{'; measured' if rates else ''}]: " + "; ".join(parts))
    if uncounted:
        lines.append(f"not in the FLOP-estimate totals (fast mode counts no fvcore FLOPs; run without --fast): "
                     f"{len(uncounted)} (model, dataset) pairs, e.g. {sorted(uncounted)[0]}")
    return lines


MAKESPAN_GPUS = (8, 64, 256)


def run_hours(mp: ModelPlan, u: float) -> float:
    """GPU-hours of one run: measured where the benchmark has a rate, else the FLOP estimate on an H100 (the
    nearest of GPUS to an H200's dense bf16 rate)."""
    if mp.measured:
        return mp.measured_gpu_hours / mp.runs
    return estimate_hours(mp, u)[list(GPUS).index("H100")] / mp.runs


def makespan(plans: list[ModelPlan], gpus: int, u: float) -> float:
    """Hours until the last run of the campaign ends on `gpus` GPUs: every run takes `world` GPUs (its torchrun
    group, params run.gpus / run.placement) for its GPU-hours / world; runs are independent of each other (the
    profile, aggregate and report stages around them take minutes), so they are gang-scheduled longest first
    (placement.makespan)."""
    from itervision.planning.placement import makespan as gang

    return gang([(mp.world, run_hours(mp, u) / mp.world) for mp in plans if not math.isnan(run_hours(mp, u))
                 for _ in range(mp.runs)], gpus)


def makespan_lines(plans: list[ModelPlan], fast: bool = False) -> list[str]:
    u = utilisation(plans, fast)
    worlds = sorted({mp.world for mp in plans})
    counted = sum(mp.runs for mp in plans if not math.isnan(run_hours(mp, u)))
    parts = [f"{g} GPUs {makespan(plans, g, u):,.1f} h" for g in MAKESPAN_GPUS]
    return [f"campaign makespan ({counted} runs of {' or '.join(map(str, worlds))} GPUs each (run.gpus / "
            f"run.placement), longest first; measured rates where the benchmark has them, else the H100 FLOP "
            f"estimate): " + ", ".join(parts)]


def summary_lines(plans: list[ModelPlan], fast: bool = False) -> list[str]:
    """The plan's answer, printed first: GPU-hours, the makespan on 8 / 64 / 256 GPUs, how many runs are
    input-bound, and which figures are measured and which estimated."""
    u = utilisation(plans, fast)
    hours = [(mp, run_hours(mp, u)) for mp in plans]
    known = [(mp, h) for mp, h in hours if not math.isnan(h)]
    total = sum(h * mp.runs for mp, h in known)
    measured = sum(mp.runs for mp, _ in known if mp.measured)
    runs = sum(mp.runs for mp in plans)
    capped = sum(mp.runs for mp in plans if mp.measured and mp.input.get("cap")
                 and mp.input["cap"] < mp.measured["images_per_s"])
    spans = ", ".join(f"{g} GPUs {makespan(plans, g, u):,.1f} h" for g in MAKESPAN_GPUS)
    return ["== summary ==",
            f"{runs} training runs, {total:,.0f} GPU-hours in all; makespan {spans}",
            f"measured: {measured} of {runs} runs at their benchmarked GPU rate; estimated: {runs - measured} from "
            "FLOPs (an H100 at the utilisation the cost table states; a FLOP estimate can sit far from a measured "
            "rate, about 8x for these small models, bound by launches and memory rather than FLOPs)",
            f"input-bound: {capped} runs whose loader cannot feed their GPU rate (planned at the input rate)"
            if any(mp.input for mp in plans) else "input-bound: not checked (give --cpus-per-gpu to cap runs at "
                                                   "the measured input rate)",
            "details follow", ""]


def published_check(p: Params) -> list[str]:
    """GFLOPs per exit of every SparseFormer (dataset, model) beside the published ones (fvcore convention)."""
    import torch

    from itervision.evaluation.flops import count_flops
    from itervision.layout import reference_csv
    from itervision.models.registry import build_model
    from itervision.reporting.tables import load_reference

    ref = load_reference(reference_csv("sparseformer"))
    lines = []
    for ds, m in study_models(p, "sparseformer"):
        cfg = model_config(p, m, ds)
        config = model_spec(p, m, ds).config
        model = build_model(config)
        img = torch.zeros(1, config.in_chans, config.img_size, config.img_size)
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


# ------------------------------------------------------------------------------------------ placement

def placement_table(p: Params, plans: list[ModelPlan], rates: dict, deadline_hours: float | None = None,
                    deadline_gpus: int = 8) -> tuple[list[str], dict]:
    """Per (model, dataset): the placement of fewest GPU-hours that fits the GPU (planning/placement.py), beside
    the world params give each run now (run.gpus / run.placement); GPU-hours (counted: measured or interpolated rates only)
    and makespans. With deadline_hours, the placement widens until the campaign ends within it on deadline_gpus
    GPUs. Returns (lines, totals)."""
    from itervision.planning.placement import (GPU_MEMORY_GIB, choose, counted, makespan, meet_deadline,
                                               options)

    gpu = rates.get("gpu_key") or Path(rates["path"]).stem
    memory = GPU_MEMORY_GIB.get(gpu, 79.1)
    u = utilisation(plans, fast=True)
    all_opts, placed, today, runs = {}, {}, {}, {}
    for mp in plans:
        key = (mp.study, mp.model, mp.dataset)
        train = train_config(p, mp.dataset, mp.study)
        entry = (rates.get("configs") or {}).get(f"{mp.study}/{mp.dataset}/{mp.model}")
        opts = options(entry, train.global_batch, mp.train_images * mp.epochs, memory)
        for o in opts:  # the recipe's compiled rate where it was measured at this per-GPU batch, as plan_runs does
            if train.compile == "none" or o.rate_basis != "measured":
                continue
            eager = {"images_per_s": o.images_per_s, "batch": o.batch, "compiled": False, "compile_seconds": 0.0}
            got = measured_rate(entry, o.batch, train.compile)
            if not got.get("compiled"):
                got = compiled_elsewhere(eager, rates, mp.study, mp.model, o.batch, train.compile)
            if got.get("compiled"):
                o.images_per_s = got["images_per_s"]
                o.rate_basis = "compiled~" if got.get("speedup_from") else "compiled"
                o.gpu_hours = o.world * (mp.train_images * mp.epochs / (o.world * o.images_per_s)
                                         + got["compile_seconds"]) / 3600
        cap = mp.input.get("cap")
        for o in opts:  # the input path feeds at most `cap` images/s per GPU, whatever the GPU could do
            if cap and o.images_per_s and o.images_per_s > cap and o.gpu_hours is not None:
                training = mp.train_images * mp.epochs / 3600
                o.gpu_hours = o.gpu_hours - training / o.images_per_s + training / cap
                o.images_per_s, o.input_bound = cap, True
        all_opts[key], runs[key] = opts, mp.runs
        chosen = choose(opts)
        if chosen is None:  # no rate: today's FLOP estimate at today's world, labelled
            continue
        placed[key] = chosen
        today[key] = (mp.world, run_hours(mp, u), basis(mp))
    met = None
    if deadline_hours is not None:
        placed, met = meet_deadline(placed, all_opts, runs, deadline_gpus, deadline_hours)
    lines = [f"placement on {gpu} ({memory:.0f} GiB, at most {100 * 0.9:.0f} % planned): per (model, dataset) the "
             f"number of GPUs of fewest GPU-hours that holds the global batch; rates measured / interpolated (count "
             f"toward the targets) or extrapolated (labelled, not counted)",
             f"{'study':12s} {'model':18s} {'dataset':13s} {'runs':>4s} {'GPUs':>4s} {'b/GPU':>6s} {'img/s/GPU':>10s} "
             f"{'rate':>12s} {'GiB':>6s} {'mem':>12s} {'GPU-h/run':>9s} {'params GPUs':>11s} {'params GPU-h/run':>16s}"]
    totals = {"placed_counted": 0.0, "placed_all": 0.0, "today": 0.0, "uncounted": [],
              "placement": {f"{k[2]}/{k[1]}": o.world for k, o in placed.items()}}
    for key, o in placed.items():
        study, model, ds = key
        t_world, t_hours, t_basis = today[key]
        lines.append(f"{study:12s} {model:18s} {ds:13s} {runs[key]:4d} {o.world:4d} {o.batch:6d} "
                     f"{o.images_per_s:10,.0f} {o.rate_basis + ('/input' if o.input_bound else ''):>12s} "
                     f"{o.peak_gib or float('nan'):6.1f} "
                     f"{o.memory_basis:>12s} {o.gpu_hours:9.2f} {t_world:11d} {t_hours:11.2f} ({t_basis})")
        totals["placed_all"] += o.gpu_hours * runs[key]
        totals["today"] += t_hours * runs[key]
        if counted(o):
            totals["placed_counted"] += o.gpu_hours * runs[key]
        else:
            totals["uncounted"].append(f"{model} on {ds}")
    missing = [k for k in all_opts if k not in placed]
    jobs_now = [(today[k][0], today[k][1] / today[k][0]) for k in placed for _ in range(runs[k])]
    jobs = [(placed[k].world, placed[k].hours) for k in placed for _ in range(runs[k])]
    for g in (8, 64, 256):
        totals[f"makespan_{g}"] = makespan(jobs, g)
        totals[f"makespan_today_{g}"] = makespan(jobs_now, g)
    lines.append(f"GPU-hours of the placed campaign: {totals['placed_counted']:,.0f} from measured or interpolated "
                 f"rates" + (f" + {totals['placed_all'] - totals['placed_counted']:,.0f} from extrapolated ones "
                             f"({len(totals['uncounted'])} configurations, e.g. {totals['uncounted'][0]})"
                             if totals["uncounted"] else "") + f"; as params.yaml places them now (run.gpus / run.placement): "
                 f"{totals['today']:,.0f}")
    lines.append("makespan placed / as placed now: " + ", ".join(
        f"{g} GPUs {totals[f'makespan_{g}']:,.1f} h / {totals[f'makespan_today_{g}']:,.1f} h" for g in (8, 64, 256))
        + (f" (deadline {deadline_hours:g} h on {deadline_gpus} GPUs: "
           f"{'met' if met else 'NOT met: no wider placement shortens the campaign further'})" if met is not None
           else ""))
    if missing:
        lines.append(f"not placed (no rate at any batch): {len(missing)} configurations, e.g. {missing[0][1]} on "
                     f"{missing[0][2]}; the table above leaves them out")
    return lines, totals
