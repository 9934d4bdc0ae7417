"""Benchmark: training images/s of every CPU-scale model, in the pipeline's data path and on random tensors,
at the same batch; DSA-MoE / SA-MLP time ratios at CPU scale and at the paper configuration; the DSA kernels
and MoE dispatches side by side; dispatcher-level ops per training step at the paper configuration. Prints
figures only; nothing here is a test.

    python benchmarks/training_speed.py [--steps 6] [--rounds 3] [--models sa-mlp,dsa-moe] [--paper-batch 32]
                                        [--skip-whole-run] [--skip-paper]

In-pipeline = what stages/run.py does per step: draw the batch from the in-memory uint8 split and augment it
(data/loaders.TensorBatches with the train recipe of params.yaml), soft targets, forward at every exit,
weighted loss, backward, clipping, AdamW. Model-only = the same step on a fixed random batch. Data path alone
= drawing and augmenting the same batches with no model; its time over a pipeline step is the data path's
share. This machine's neighbours make single timings noisy, so the three are interleaved for `--rounds`
rounds in one process and the fastest round of each is reported. The DSA-MoE / SA-MLP ratio is also timed
over a whole CPU-scale run (its steps, batches and lr schedule; the two models alternate in chunks of steps),
since a fresh MoE's routing is most skewed in its first steps.
"""
import argparse
import time

import torch

from itervision.data.loaders import describe_prepared, train_batches
from itervision.engine.interleaved import training_step
from itervision.engine.recipe import lr_schedule
from itervision.layout import prepared_dir
from itervision.config.matrix import model_datasets, model_spec, run_spec
from itervision.models.registry import build_model
from itervision.config.params import check_params, load_params
from itervision.config.scales import render_scale


def step_fn(model, train, num_classes, schedule=None):
    """One training step as stages/run.py takes it (engine/interleaved.training_step, which the timing stage uses)."""
    return training_step(model, train, num_classes, schedule)


def timed(fn, batches, warmup=2) -> float:
    """images/s over the batches after `warmup` steps."""
    t0, images = None, 0
    for i, (img, target) in enumerate(batches):
        if i == warmup:
            t0 = time.perf_counter()
        if i >= warmup:
            images += len(target)
        fn(img, target)
    return images / (time.perf_counter() - t0)


def pipeline_batches(batches, steps):
    for i, (_, img, target) in enumerate(batches.epoch(0)):
        if i >= steps:
            return
        yield img, target


def random_batches(img, target, steps):
    for _ in range(steps):
        yield img, target


def cpu_scale_run(p, name, moe_kernel: str | None = None):
    """A CPU-scale model as its run starts (seed 0): config, train recipe, data description, the run's batches,
    the fresh model (`moe_kernel`: the MoE kernel instead of the configured one)."""
    import dataclasses

    ds = model_datasets(p, name)[0]
    spec, train = model_spec(p, name, ds), run_spec(p, name, ds).train
    torch.set_num_threads(train.threads)
    desc = describe_prepared(prepared_dir(ds))
    batches = train_batches(prepared_dir(ds), spec.config.img_size, train, train.batching(1), seed=0)
    cfg = dataclasses.replace(spec.config, moe_kernel=moe_kernel) if moe_kernel else spec.config
    torch.manual_seed(0)
    model = build_model(cfg).train()
    return cfg, train, desc, batches, model


def cpu_scale(args):
    p = load_params(args.params)
    names = args.models.split(",") if args.models else [m for s in ("recursive", "sparseformer")
                                                        for m in p.study(s).main + p.study(s).ablations]
    rows = {}
    for name in names:
        cfg, train, desc, batches, model = cpu_scale_run(p, name)
        step = step_fn(model, train, len(desc["classes"]))
        b = train.global_batch
        img = torch.randn(b, desc["channels"], cfg.img_size, cfg.img_size)
        target = torch.randint(0, len(desc["classes"]), (b,))
        best = {"pipeline": 0.0, "model": 0.0, "data": 0.0}
        for _ in range(args.rounds):
            best["model"] = max(best["model"], timed(step, random_batches(img, target, args.steps + 2)))
            best["pipeline"] = max(best["pipeline"], timed(step, pipeline_batches(batches, args.steps + 2)))
            best["data"] = max(best["data"], timed(lambda i, t: None, pipeline_batches(batches, args.steps + 2)))
        rows[name] = (b, best["pipeline"], best["model"])
        # The difference of two noisy step timings swings by +-10-30 % on this machine; the data path's own
        # time (drawing and augmenting the batches, no model) over a whole pipeline step does not.
        share = best["pipeline"] / best["data"]
        print(f"{name:20s} batch {b:4d}  in pipeline {best['pipeline']:7.0f} img/s  model only {best['model']:7.0f} "
              f"img/s  difference {100 * (1 - best['pipeline'] / best['model']):5.1f}%  data path alone "
              f"{best['data']:8.0f} img/s = {100 * share:4.1f}% of a pipeline step", flush=True)
    return rows


def ratio_line(rows, a, b, what):
    if a in rows and b in rows:
        print(f"{what}: {b} / {a} training time per image = {rows[a][1] / rows[b][1]:.3f} (in pipeline), "
              f"{rows[a][2] / rows[b][2]:.3f} (model only)")


def whole_run_ratio(args, a="sa-mlp", b="dsa-moe", chunk=10):
    """Training time of whole CPU-scale runs (the run's steps, batches and lr schedule, seed 0): `a`, and `b`
    with each MoE kernel of --moe-kernels, taken in chunks of `chunk` steps alternating between them in one
    process, so the machine's drift over the minutes hits all alike. This is how the CPU scale's kernel is
    chosen (docs/performance.md)."""
    p = load_params(args.params)
    runs = {}
    for name, kernel in [(a, None)] + [(b, k) for k in args.moe_kernels.split(",")]:
        _, train, desc, batches, model = cpu_scale_run(p, name, kernel)
        total, schedule = lr_schedule(train, len(batches))
        runs[name if kernel is None else f"{name} ({kernel})"] = {
            "step": step_fn(model, train, len(desc["classes"]), schedule),
            "batches": pipeline_batches(batches, total), "seconds": [], "total": total}
    total = min(r["total"] for r in runs.values())
    for _ in range(0, total, chunk):
        for r in runs.values():
            t0 = time.perf_counter()
            for _, (img, target) in zip(range(chunk), r["batches"]):
                r["step"](img, target)
            r["seconds"].append(time.perf_counter() - t0)
    ta = runs[a]["seconds"]
    head = 2  # the first 2 chunks: routing still settling
    for label, r in runs.items():
        if label == a:
            continue
        tb = r["seconds"]
        print(f"CPU scale, whole run ({total} steps in chunks of {chunk}, alternating): {a} {sum(ta):.1f} s, {label} "
              f"{sum(tb):.1f} s, time ratio {sum(tb) / sum(ta):.3f} (first {head * chunk} steps "
              f"{sum(tb[:head]) / sum(ta[:head]):.3f}, the rest {sum(tb[head:]) / sum(ta[head:]):.3f}; per chunk "
              f"{min(y / x for x, y in zip(ta, tb)):.3f}-{max(y / x for x, y in zip(ta, tb)):.3f})", flush=True)


def paper_scale(args):
    """DSA-MoE against SA-MLP at the paper configuration (CIFAR-10, 32 px, d 512), random tensors."""
    import dataclasses

    p = check_params(render_scale("paper"))
    train = dataclasses.replace(run_spec(p, "sa-mlp", "cifar10").train, mixup=0.0, cutmix=0.0)
    steps, out = {}, {"sa-mlp": 0.0, "dsa-moe": 0.0}
    for name in out:
        torch.manual_seed(0)
        model = build_model(model_spec(p, name, "cifar10").config).train()
        steps[name] = step_fn(model, train, 10)
    img, target = torch.randn(args.paper_batch, 3, 32, 32), torch.randint(0, 10, (args.paper_batch,))
    for _ in range(args.rounds):  # interleaved, like the CPU-scale rows
        for name, step in steps.items():
            out[name] = max(out[name], timed(step, random_batches(img, target, 4), warmup=1))
    print(f"paper configuration (batch {args.paper_batch}): sa-mlp {out['sa-mlp']:.1f} img/s, dsa-moe "
          f"{out['dsa-moe']:.1f} img/s, dsa-moe / sa-mlp time = {out['sa-mlp'] / out['dsa-moe']:.3f} "
          f"(block MAC ratio 0.52; published 165/180 = 0.92 on an RTX 3090)")


def kernels(args):
    """The two DSA kernels and the MoE kernels on one block's input, forward + backward: `dense` (gated MLP),
    `grouped` (torch._grouped_mm on the routed pairs), and a loop over experts on exactly their tokens (the
    FLOP-exact reference)."""
    from itervision.models.recursive import MoE, RecursiveAttention

    torch.manual_seed(0)
    for d, B, L, label in ((64, 256, 10, "CPU scale"), (512, 32, 18, "paper width")):
        x = torch.randn(B, L, d, requires_grad=True)
        res = {}
        for kernel in ("masked", "gathered"):
            att = RecursiveAttention(d, 8 if d == 512 else 4, "dsa", 6 if d == 512 else 4, kernel).train()
            res[kernel] = best_ms(lambda: att(x)[0].sum().backward(), args.rounds)
        moe = MoE(d, d, 4, 2, "dense")
        for kernel in ("dense", "grouped"):
            moe.kernel = kernel
            res[f"moe {kernel}"] = best_ms(lambda: moe(x)[0].sum().backward(), args.rounds)

        def loop():
            x2d = x.reshape(-1, d)
            _, weight, idx = moe.route(x2d)
            moe._per_expert(x2d, weight, idx).sum().backward()

        res["moe loop over experts"] = best_ms(loop, args.rounds)
        print(f"{label} (d {d}, batch {B}, L {L}), forward + backward, ms: "
              + ", ".join(f"{k} {v:.2f}" for k, v in res.items()))


def op_counts(batch: int = 4):
    """Dispatcher-level ops of one training step at the paper configuration (the proxy for GPU kernels)."""
    from itervision.engine.opcount import step_ops

    p = check_params(render_scale("paper"))
    counts = {}
    for name in ("sa-mlp", "sa-moe", "dsa-moe"):
        torch.manual_seed(0)
        ops = step_ops(build_model(model_spec(p, name, "cifar10").config), batch)
        counts[name] = (sum(ops.values()), ops["aten._local_scalar_dense"])
    print(f"paper configuration, ops per training step (batch {batch}, forward + backward): "
          + ", ".join(f"{k} {n:,} ({reads} host reads)" for k, (n, reads) in counts.items())
          + f"; dsa-moe / sa-mlp {counts['dsa-moe'][0] / counts['sa-mlp'][0]:.3f}")


def best_ms(fn, rounds, repeats=10) -> float:
    fn()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, (time.perf_counter() - t0) / repeats)
    return best * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--models", help="comma-separated model names (default: every model of both studies)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--paper-batch", type=int, default=32)
    ap.add_argument("--skip-paper", action="store_true")
    ap.add_argument("--skip-whole-run", action="store_true", help="skip timing whole CPU-scale runs (~1 min each)")
    ap.add_argument("--skip-cpu-scale", action="store_true", help="skip the per-model rows (fresh models)")
    ap.add_argument("--moe-kernels", default="dense,grouped",
                    help="the MoE kernels the whole-run timing compares (dsa-moe against sa-mlp)")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; fastest of {args.rounds} interleaved rounds")
    if not args.skip_cpu_scale:
        rows = cpu_scale(args)
        ratio_line(rows, "sa-mlp", "dsa-moe", "CPU scale, fresh models")
    if not args.skip_whole_run:
        whole_run_ratio(args)
    kernels(args)
    op_counts()
    if not args.skip_paper:
        paper_scale(args)


if __name__ == "__main__":
    main()
