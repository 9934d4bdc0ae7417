"""GPU benchmark of every paper configuration (`make gpu-benchmark`): writes benchmarks/results/<gpu>.json, which
`make paper-plan GPU=<gpu>` plans from. Prints figures only; nothing here is a test.

For each (study, dataset, model) of the paper scale, the training step as stages/run.py takes it (soft targets
with the recipe's mixup/CutMix, forward at every exit under bf16 autocast, weighted soft-target CE + auxiliary
loss, backward, clipping, AdamW) on random images:
    training images/s at the placement's batches (the global batch on one GPU, half of it on two) and at the
    8-GPU plan's per-GPU batch (global batch / 8) and 4x it, peak memory;
and for the main models of each study:
    CUDA kernels and host syncs per step (torch.profiler; torch.cuda.set_sync_debug_mode counts every sync),
    torch.compile time and speed-up (train.compile = reduce-overhead: CUDA graphs),
    evaluation images/s and batch-1 latency per exit;
and for the main models, fed by the real input path instead of random tensors (the recipe's train.augment_on:
shards of natural-photo JPEGs decoded and augmented on the GPU for ImageNet, uint8 arrays augmented on the GPU for
CIFAR/MNIST; the run's loader workers): training images/s, and the input path alone (decode + augmentation).
Work is ordered by what the plan and the speed claims need most, within a time budget (--budget-seconds); what
the budget leaves out is listed in the file as skipped. The file is rewritten after every measurement, so an
interrupted run keeps what it measured. Without CUDA it says so in one line and exits 0 (--device cpu runs the
same code on the CPU, for checking the script itself).

    PYTHONPATH=src python benchmarks/gpu_speed.py [--budget-seconds 420] [--out benchmarks/results/GPU.json]
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import re
import sys
import time
import warnings
from pathlib import Path

import torch

from itervision.engine.recipe import SoftTargets, build_optimizer, step_loss
from itervision.config.matrix import model_spec, run_spec, study_models
from itervision.models.registry import build_model
from itervision.config.params import check_params
from itervision.config.scales import render_scale

MAIN = {"recursive": ("sa-mlp", "dsa-moe", "sa-moe", "encoder-only"),
        "sparseformer": ("sf-recurrent", "sf-static-16", "sf-static-25")}


class Bench:
    def __init__(self, args):
        self.args, self.t0 = args, time.perf_counter()
        self.device = torch.device(args.device)
        self.p = check_params(render_scale(args.scale))
        self.world = self.p.run.gpus  # the scale's processes per run before any placement (run.gpus)
        name = torch.cuda.get_device_name() if self.device.type == "cuda" else "cpu"
        self.out = Path(args.out or f"benchmarks/results/{re.sub(r'[^a-z0-9]+', '-', name.lower()).strip('-')}.json")
        self.result = {"gpu": name, "date": datetime.date.today().isoformat(), "torch": torch.__version__,
                       "source": "make gpu-benchmark (benchmarks/gpu_speed.py)", "per_gpu_batch_rule":
                       f"global batch / {self.world}", "configs": {}, "skipped": [], "errors": []}
        if self.out.exists():  # the same GPU measured before: new figures are added to (and replace) its own
            old = json.loads(self.out.read_text())
            if old.get("gpu") == name:
                self.result["configs"] = old.get("configs", {})
                self.result["notes"] = old.get("notes", []) + [f"{old.get('date')}: earlier figures kept where not "
                                                               f"remeasured (torch {old.get('torch')})"]

    # ------------------------------------------------------------------ helpers
    def left(self) -> float:
        return self.args.budget_seconds - (time.perf_counter() - self.t0)

    def save(self):
        self.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.result, indent=1) + "\n")
        tmp.replace(self.out)

    def entry(self, study, ds, m) -> dict:
        return self.result["configs"].setdefault(f"{study}/{ds}/{m}", {})

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def build(self, study, ds, m, **config_changes):
        spec = model_spec(self.p, m, ds)
        config = dataclasses.replace(spec.config, **config_changes) if config_changes else spec.config
        torch.manual_seed(0)
        model = build_model(config).to(self.device)
        train = run_spec(self.p, m, ds).train
        return model, train

    def step_fn(self, model, train, compiled=None):
        """One training step as stages/run.py takes it (world 1)."""
        opt = build_optimizer(model, train)
        targets = SoftTargets(train, model.cfg.num_classes)
        weights = torch.tensor(model.exit_loss_weights(), device=self.device)
        forward = model if compiled is None else compiled
        cudagraphs = compiled is not None and self.args.compile_mode == "reduce-overhead"

        def step(img, target):
            img, soft = targets(img, target)
            opt.zero_grad(set_to_none=True)
            if cudagraphs:
                torch.compiler.cudagraph_mark_step_begin()
            with torch.autocast(self.device.type, dtype=torch.bfloat16):
                out = forward(img)
            loss = step_loss(out, soft, weights)[0]
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), train.clip_grad)
            opt.step()
        return step

    def batch(self, model, n):
        c = model.cfg
        return (torch.randn(n, c.in_chans, c.img_size, c.img_size, device=self.device),
                torch.randint(0, c.num_classes, (n,), device=self.device))

    def timed(self, step, img, target, warmup, steps) -> float:
        for _ in range(warmup):
            step(img, target)
        self.sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            step(img, target)
        self.sync()
        return len(img) * steps / (time.perf_counter() - t0)

    def attempt(self, what: str, fn):
        try:
            fn()
        except Exception as err:  # one configuration failing must not lose the others' figures
            self.result["errors"].append(f"{what}: {type(err).__name__}: {str(err).splitlines()[0][:200]}")
            print(f"  {what}: FAILED {type(err).__name__}: {str(err).splitlines()[0][:200]}", flush=True)
        finally:
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        self.save()

    # ------------------------------------------------------------------ measurements
    def train_speed(self, study, ds, m, batches, label="train_images_per_s", **config_changes):
        model, train = self.build(study, ds, m, **config_changes)
        step = self.step_fn(model, train)
        rates, memory = {}, {}
        for b in batches:
            img, target = self.batch(model, b)
            if self.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            rates[str(b)] = self.timed(step, img, target, self.args.warmup, self.args.steps)
            if self.device.type == "cuda":
                memory[str(b)] = torch.cuda.max_memory_allocated() / 2 ** 30
        e = self.entry(study, ds, m)
        e.setdefault(label, {}).update(rates)
        if memory:
            e.setdefault(label.replace("train_images_per_s", "peak_gib"), {}).update(memory)
        print(f"{study}/{ds}/{m}{' ' + str(config_changes) if config_changes else ''}: "
              + ", ".join(f"b{b} {v:,.0f} img/s" for b, v in rates.items())
              + (", peak " + ", ".join(f"{v:.2f} GiB" for v in memory.values()) if memory else ""), flush=True)

    def input_set(self, ds, cfg, n: int) -> Path:
        """A prepared dataset in the real format for the input path: ImageNet shards of n natural photos
        (benchmarks/input_speed.py), or n uint8 arrays of the dataset's size; cached per dataset for the run."""
        import tempfile

        import numpy as np

        from itervision.io import write_json

        cache = getattr(self, "_inputs", None) or {}
        self._inputs = cache
        if ds in cache:
            return cache[ds]
        folder = Path(tempfile.mkdtemp(prefix=f"bench-{ds}-"))
        if ds in self.p.subset.imagenet:
            sys.path.insert(0, str(Path(__file__).parent))
            from input_speed import SIZES, photos, shard_set

            shard_set(folder, photos(n), SIZES.get(ds, (None, None))[1])
            write_json(folder / "summary.json", {"classes": [f"c{i}" for i in range(cfg.num_classes)],
                                                 "totals": {"train": n}})
        else:
            rng = np.random.default_rng(0)
            images = rng.integers(0, 255, (n, cfg.img_size, cfg.img_size, cfg.in_chans), dtype=np.uint8)
            np.savez(folder / "train.npz", images=images, labels=np.arange(n) % cfg.num_classes)
            write_json(folder / "manifest.json", {"classes": [str(i) for i in range(cfg.num_classes)],
                                                  "channels": cfg.in_chans, "mean": [0.5] * cfg.in_chans,
                                                  "std": [0.25] * cfg.in_chans, "splits": {"train": {"count": n}}})
        cache[ds] = folder
        return folder

    def loader_fed(self, study, ds, m, batch):
        """Training images/s with the recipe's input path feeding the step (loader workers, decode and
        augmentation where train.augment_on says), and the input path's own images/s, at one GPU's batch."""
        import os

        from itervision.data.loaders import train_batches

        model, train = self.build(study, ds, m)
        workers = min(train.workers, os.cpu_count() or 1)
        train = dataclasses.replace(train, global_batch=batch, micro_batch=None, steps_per_epoch=None,
                                    repeated_aug=1, workers=workers)
        prepared = self.input_set(ds, model.cfg, max(2 * batch, 64))
        batches = train_batches(prepared, model.cfg.img_size, train, train.batching(1), seed=0, device=self.device)
        step = self.step_fn(model, train)

        def stream():
            epoch = 0
            while True:
                for _, img, target in batches.epoch(epoch):
                    yield img, target.to(self.device, non_blocking=True)
                epoch += 1

        feed = stream()
        for _ in range(self.args.warmup):
            step(*next(feed))
        self.sync()
        t0 = time.perf_counter()
        for _ in range(self.args.steps):
            step(*next(feed))
        self.sync()
        fed = batch * self.args.steps / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(self.args.steps):
            img, _ = next(feed)
        self.sync()
        alone = batch * self.args.steps / (time.perf_counter() - t0)
        e = self.entry(study, ds, m)
        e.setdefault("loader_fed_images_per_s", {})[str(batch)] = fed
        e.setdefault("input_images_per_s", {})[str(batch)] = alone
        e["input_path"] = {"augment_on": train.augment_on, "workers": workers}
        print(f"{study}/{ds}/{m} fed by its input path ({train.augment_on}, {workers} workers): b{batch} {fed:,.0f} "
              f"img/s training, {alone:,.0f} img/s input alone", flush=True)

    def kernels_and_syncs(self, study, ds, m, batch, prefix="", **config_changes):
        """CUDA kernels of one step (profiler) and host syncs per step (sync debug mode)."""
        from torch.profiler import ProfilerActivity, profile

        model, train = self.build(study, ds, m, **config_changes)
        step = self.step_fn(model, train)
        img, target = self.batch(model, batch)
        for _ in range(self.args.warmup):
            step(img, target)
        self.sync()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                step(img, target)
                self.sync()
            finally:
                torch.cuda.set_sync_debug_mode(0)
        # only the per-operation warnings ("called a synchronizing CUDA operation"), not torch's one-time notice
        # that the debug mode is a prototype
        syncs = sum("called a synchronizing" in str(w.message) for w in caught)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step(img, target)
            self.sync()
        kernels = sum(1 for e in prof.events() if e.device_type.name == "CUDA")
        e = self.entry(study, ds, m)
        e[prefix + "kernels_per_step"], e[prefix + "host_syncs_per_step"], e["kernels_batch"] = kernels, syncs, batch
        print(f"{study}/{ds}/{m}{' ' + str(config_changes) if config_changes else ''} b{batch}: {kernels:,} CUDA "
              f"kernels, {syncs} host syncs per step", flush=True)

    def moe_kernels_agree(self):
        """The grouped MoE kernel against the dense one on the paper width (bf16 autocast): largest difference."""
        from itervision.models.recursive import MoE

        torch.manual_seed(0)
        moe = MoE(512, 512, 4, 2, "grouped").to(self.device)
        x = torch.randn(4096, 512, device=self.device)
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            grouped = moe(x)[0].float()
            moe.kernel = "dense"
            dense = moe(x)[0].float()
        diff = (grouped - dense).abs().max().item()
        self.result["moe_grouped_vs_dense_max_abs_diff"] = diff
        print(f"MoE grouped vs dense (bf16, 4096 tokens, d 512): max |difference| {diff:.3g} (output scale "
              f"{dense.abs().mean().item():.3g})", flush=True)

    def compiled_speed(self, study, ds, m, batch):
        model, train = self.build(study, ds, m)
        compiled = torch.compile(model, mode=self.args.compile_mode, fullgraph=True)
        step = self.step_fn(model, train, compiled)
        img, target = self.batch(model, batch)
        t0 = time.perf_counter()
        step(img, target)  # compiles the forward and backward graphs
        step(img, target)  # CUDA graphs record on the second call
        self.sync()
        compile_s = time.perf_counter() - t0
        rate = self.timed(step, img, target, 2, self.args.steps)
        e = self.entry(study, ds, m)
        eager = e.get("train_images_per_s", {}).get(str(batch))
        got = {"mode": self.args.compile_mode, "batch": batch, "compile_seconds": compile_s,
               "train_images_per_s": rate, "speedup": rate / eager if eager else None}
        e.setdefault("compiled_at", {})[str(batch)] = got  # every batch measured compiled (the placement reads it)
        e.setdefault("compiled", got)  # the plan's batch, as before
        print(f"{study}/{ds}/{m} b{batch} compiled ({self.args.compile_mode}): {rate:,.0f} img/s after "
              f"{compile_s:.0f} s of compiling" + (f", x{rate / eager:.2f} over eager" if eager else ""), flush=True)

    def inference(self, study, ds, m, batch):
        from itervision.evaluation.timing import time_exits

        model, _ = self.build(study, ds, m)
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            rows = time_exits(model, batch, 3, 5, 10)
        self.entry(study, ds, m)["eval"] = rows
        print(f"{study}/{ds}/{m} inference b{batch}: " + ", ".join(
            f"exit {r['exit']} {r['images_per_s']:,.0f} img/s {r['latency_ms']:.1f} ms" for r in rows[:3])
            + (" ..." if len(rows) > 3 else ""), flush=True)

    # ------------------------------------------------------------------ plan
    def by_value(self, pairs: list) -> list:
        """Configurations by their GPU-hours in the current plan (from this GPU's earlier figures, where any),
        costliest first: what a cut-short run should have measured."""
        from itervision.planning.plan import load_rates, plan_runs, run_hours, utilisation

        rates = load_rates(str(self.out)) if self.out.exists() else None
        plans = plan_runs(self.p, memory=False, fast=True, rates=rates)
        u = utilisation(plans, fast=True)
        hours = {(mp.study, mp.dataset, mp.model): run_hours(mp, u) * mp.runs for mp in plans}
        return sorted(pairs, key=lambda a: -(hours.get(a) if hours.get(a) == hours.get(a) else 0.0))

    def run(self):
        p = self.p
        pairs = [(s, ds, m) for s in p.studies for ds, m in study_models(p, s)]
        per_gpu = {(s, ds, m): run_spec(p, m, ds).train.batching(self.world).per_process for s, ds, m in pairs}
        first = {s: p.study(s).datasets[0] for s in p.studies}
        main = [(s, first[s], m) for s in p.studies for m in MAIN[s] if (s, first[s], m) in per_gpu]
        jobs = []
        # the placement's batches first (planning/placement.py): the whole global batch on one GPU and half of it on
        # each of two, every configuration, the costliest in the plan first; then the main models compiled at the
        # global batch (SparseFormer's too), the routed MoE kernel there (rate, agreement, host syncs), evaluation
        # and batch-1 latency per exit; then the figures of the 8-GPU batches
        glob = {a: run_spec(p, a[2], a[1]).train.global_batch for a in pairs}
        for a in self.by_value(pairs):
            for b in (glob[a], glob[a] // 2):
                jobs.append((f"train {'/'.join(a)} b{b}", lambda a=a, b=b: self.train_speed(*a, [b])))
        # the same steps fed by the real input path (shards on the GPU), beside the random-tensor rates: every
        # ImageNet configuration of the main models and the main recursive ones, at the largest batch measured
        fed = [a for a in pairs if a[2] in MAIN[a[0]] and (a[1] in p.subset.imagenet or a in main)]
        for a in self.by_value(fed):
            jobs.append((f"loader {'/'.join(a)} b{glob[a]}", lambda a=a: self.loader_fed(*a, glob[a])))
        for a in main:
            jobs.append((f"compile {'/'.join(a)} b{glob[a]}", lambda a=a: self.compiled_speed(*a, glob[a])))
        moe = ("recursive", first["recursive"], "dsa-moe")
        if moe in per_gpu:  # the routed kernel at the placement's batch: its rate, and that it syncs nothing
            jobs.append((f"train {'/'.join(moe)} grouped b{glob[moe]}", lambda: self.train_speed(
                *moe, [glob[moe]], label="grouped_train_images_per_s", moe_kernel="grouped")))
            if self.device.type == "cuda":
                jobs.append(("moe kernels agree", self.moe_kernels_agree))
                jobs.append((f"kernels {'/'.join(moe)} grouped b{glob[moe]}", lambda: self.kernels_and_syncs(
                    *moe, glob[moe], prefix="grouped_", moe_kernel="grouped")))
        for s, ds, m in main:  # evaluation images/s and batch-1 latency per exit
            jobs.append((f"inference {s}/{ds}/{m}", lambda a=(s, ds, m): self.inference(*a, 256)))
        for s, ds, m in main:  # the speed claims: the main models at the 8-GPU plan's batch and at 4x it
            jobs.append((f"train {s}/{ds}/{m}",
                         lambda a=(s, ds, m): self.train_speed(*a, [per_gpu[a], 4 * per_gpu[a]])))
        if ("recursive", first["recursive"], "dsa-moe") in per_gpu:
            a = ("recursive", first["recursive"], "dsa-moe")
            jobs.append((f"train {'/'.join(a)} grouped", lambda: self.train_speed(
                *a, [per_gpu[a]], label="grouped_train_images_per_s", moe_kernel="grouped")))
        if self.device.type == "cuda":
            for s, ds, m in main[:2] + [("sparseformer", first["sparseformer"], "sf-recurrent")]:
                jobs.append((f"kernels {s}/{ds}/{m}", lambda a=(s, ds, m): self.kernels_and_syncs(*a, per_gpu[a])))
        for s, ds, m in pairs:  # every other configuration at the plan's batch
            if (s, ds, m) not in main:
                jobs.append((f"train {s}/{ds}/{m}", lambda a=(s, ds, m): self.train_speed(*a, [per_gpu[a]])))
        for s, ds, m in [a for a in main if a[0] == "recursive" and a[2] in ("sa-mlp", "dsa-moe")]:
            jobs.append((f"compile {s}/{ds}/{m}", lambda a=(s, ds, m): self.compiled_speed(*a, per_gpu[a])))
        for what, fn in jobs:
            if self.left() < (120 if what.startswith("compile") else 10):
                self.result["skipped"].append(what)
                continue
            self.attempt(what, fn)
        self.result["seconds"] = time.perf_counter() - self.t0
        self.save()
        done = sum(1 for e in self.result["configs"].values() if "train_images_per_s" in e)
        print(f"wrote {self.out}: {done} of {len(pairs)} configurations timed in {self.result['seconds']:.0f} s; "
              f"{len(self.result['skipped'])} jobs skipped for time, {len(self.result['errors'])} failed")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-seconds", type=float, default=420)
    ap.add_argument("--out", help="the results file (default benchmarks/results/<gpu name>.json)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--compile-mode", default="reduce-overhead")
    ap.add_argument("--scale", default="paper", help="the configurations of this scale (tiny: to check the script)")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: nothing measured (run `make gpu-benchmark` on a GPU machine)")
        sys.exit(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    Bench(args).run()


if __name__ == "__main__":
    main()
