"""Benchmark: training images/s of every CPU-scale model, in the pipeline's data path and on random tensors,
at the same batch; DSA-MoE / SA-MLP time ratios at CPU scale and at the paper configuration; the DSA kernels
and MoE dispatch side by side. Prints figures only; nothing here is a test.

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
from itervision.engine.recipe import SoftTargets, build_optimizer, lr_at, peak_lr, soft_target_ce
from itervision.layout import prepared_dir
from itervision.models.registry import build_model
from itervision.params import check_params, load_params, model_config, train_config
from itervision.pipeline import model_datasets, study_of
from itervision.scales import render_scale


def step_fn(model, train, num_classes, schedule=None):
    """One training step as stages/run.py takes it; `schedule` (step -> lr) sets the lr of each step."""
    opt = build_optimizer(model, train, 1)
    targets = SoftTargets(train, num_classes)
    weights = torch.tensor(model.exit_loss_weights())
    taken = [0]

    def step(img, target):
        if schedule is not None:
            for group in opt.param_groups:
                group["lr"] = schedule(taken[0])
            taken[0] += 1
        img, soft = targets(img, target)
        out = model(img)
        loss = (weights * torch.stack([soft_target_ce(lg, soft) for lg in out["logits"]])).sum() + out["aux_loss"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train["clip_grad"] or 1e9)
        opt.step()
    return step


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


def cpu_scale_run(p, name):
    """A CPU-scale model as its run starts (seed 0): config, train recipe, data description, the run's batches,
    the fresh model."""
    ds = model_datasets(p, name)[0]
    cfg, train = model_config(p, name, ds), train_config(p, ds, study_of(p, name))
    desc = describe_prepared(prepared_dir(ds))
    batches = train_batches(prepared_dir(ds), cfg["img_size"], train, seed=0)
    torch.manual_seed(0)
    model = build_model(cfg, len(desc["classes"]), desc["channels"]).train()
    return cfg, train, desc, batches, model


def cpu_scale(args):
    p = load_params(args.params)
    names = args.models.split(",") if args.models else [m for s in ("recursive", "sparseformer")
                                                        for m in p.study(s).main + p.study(s).ablations]
    rows = {}
    for name in names:
        cfg, train, desc, batches, model = cpu_scale_run(p, name)
        step = step_fn(model, train, len(desc["classes"]))
        b = train["batch_size"]
        img = torch.randn(b, desc["channels"], cfg["img_size"], cfg["img_size"])
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
    """Training time of two whole CPU-scale runs (the run's steps, batches and lr schedule, seed 0), taken in
    chunks of `chunk` steps alternating between the models in one process, so the machine's drift hits both.
    A fresh MoE routes most tokens to one expert for its first ~10-20 steps (the busiest expert gets up to 2x
    the mean load, so the padded buffer does up to 2x the expert work; ~1.2x later), which a few-step timing
    of fresh models over-weights."""
    p = load_params(args.params)
    runs = {}
    for name in (a, b):
        _, train, desc, batches, model = cpu_scale_run(p, name)
        total = train["epochs"] * len(batches)
        warmup, peak = int(train["warmup_epochs"] * len(batches)), peak_lr(train, 1)

        def schedule(i, total=total, warmup=warmup, peak=peak, train=train):
            return lr_at(i, total, warmup, peak, train["min_lr"], train["warmup_lr"])
        runs[name] = {"step": step_fn(model, train, len(desc["classes"]), schedule),
                      "batches": pipeline_batches(batches, total), "seconds": [], "total": total}
    total = min(r["total"] for r in runs.values())
    for _ in range(0, total, chunk):
        for r in runs.values():
            t0 = time.perf_counter()
            for _, (img, target) in zip(range(chunk), r["batches"]):
                r["step"](img, target)
            r["seconds"].append(time.perf_counter() - t0)
    ta, tb = (runs[n]["seconds"] for n in (a, b))
    head = 2  # the first 2 chunks: routing still settling
    print(f"CPU scale, whole run ({total} steps in chunks of {chunk}, alternating): {a} {sum(ta):.1f} s, {b} "
          f"{sum(tb):.1f} s, {b} / {a} training time = {sum(tb) / sum(ta):.3f} (first {head * chunk} steps "
          f"{sum(tb[:head]) / sum(ta[:head]):.3f}, the rest {sum(tb[head:]) / sum(ta[head:]):.3f}; per chunk "
          f"{min(y / x for x, y in zip(ta, tb)):.3f}-{max(y / x for x, y in zip(ta, tb)):.3f})", flush=True)


def paper_scale(args):
    """DSA-MoE against SA-MLP at the paper configuration (CIFAR-10, 32 px, d 512), random tensors."""
    p = check_params(render_scale("paper"))
    train = train_config(p, "cifar10", "recursive")
    steps, out = {}, {"sa-mlp": 0.0, "dsa-moe": 0.0}
    for name in out:
        torch.manual_seed(0)
        model = build_model(model_config(p, name, "cifar10"), 10, 3).train()
        steps[name] = step_fn(model, {**train, "mixup": 0.0, "cutmix": 0.0}, 10)
    img, target = torch.randn(args.paper_batch, 3, 32, 32), torch.randint(0, 10, (args.paper_batch,))
    for _ in range(args.rounds):  # interleaved, like the CPU-scale rows
        for name, step in steps.items():
            out[name] = max(out[name], timed(step, random_batches(img, target, 4), warmup=1))
    print(f"paper configuration (batch {args.paper_batch}): sa-mlp {out['sa-mlp']:.1f} img/s, dsa-moe "
          f"{out['dsa-moe']:.1f} img/s, dsa-moe / sa-mlp time = {out['sa-mlp'] / out['dsa-moe']:.3f} "
          f"(block MAC ratio 0.52; published 165/180 = 0.92 on an RTX 3090)")


def kernels(args):
    """The two DSA kernels and the two MoE dispatches on one block's input, forward + backward."""
    from itervision.models.recursive import MoE, RecursiveAttention

    torch.manual_seed(0)
    for d, B, L, label in ((64, 256, 10, "CPU scale"), (512, 32, 18, "paper width")):
        x = torch.randn(B, L, d, requires_grad=True)
        res = {}
        for kernel in ("masked", "gathered"):
            att = RecursiveAttention(d, 8 if d == 512 else 4, "dsa", 6 if d == 512 else 4, kernel).train()
            res[kernel] = best_ms(lambda: att(x)[0].sum().backward(), args.rounds)
        moe = MoE(d, d, 4, 2)

        def loop():
            x2d = x.reshape(-1, d)
            _, weight, idx = moe.route(x2d)
            out = torch.zeros_like(x2d)
            for e in range(4):
                token, slot = (idx == e).nonzero(as_tuple=True)
                out = out.index_add(0, token, moe.expert(e, x2d[token]) * weight[token, slot, None])
            out.sum().backward()

        # The alternative to padding: one matmul per expert on its contiguous rows. Faster here alone under
        # skewed routing, yet no faster in whole-model training at either width (README "Speed"), so the
        # model keeps the padded buffer; this keeps the comparison measurable.
        def sorted_slices():
            x2d = x.reshape(-1, d)
            _, weight, idx = moe.route(x2d)
            flat = idx.reshape(-1)
            order = flat.argsort(stable=True)
            rows = x2d.index_select(0, order // 2).split(torch.bincount(flat, minlength=4).tolist())
            y = torch.cat([moe.expert(e, r) for e, r in enumerate(rows)])
            where = torch.empty_like(order).scatter_(0, order, torch.arange(len(order)))
            ((y.index_select(0, where).view(-1, 2, d) * weight[..., None]).sum(1)).sum().backward()
        for routing, bias in (("", None), (" (skewed routing)", [1.0, 0.5, 0.0, 0.0])):
            if bias is not None:  # loads like the paper model's at init: the busiest expert ~1.8x the mean
                with torch.no_grad():
                    moe.router.bias.copy_(torch.tensor(bias))
            res[f"moe padded{routing}"] = best_ms(lambda: moe(x)[0].sum().backward(), args.rounds)
            res[f"moe sorted slices{routing}"] = best_ms(sorted_slices, args.rounds)
        with torch.no_grad():
            moe.router.bias.zero_()
        res["moe loop over experts"] = best_ms(loop, args.rounds)
        print(f"{label} (d {d}, batch {B}, L {L}), forward + backward, ms: "
              + ", ".join(f"{k} {v:.2f}" for k, v in res.items()))


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
    ap.add_argument("--skip-whole-run", action="store_true", help="skip timing two whole CPU-scale runs (~1 min)")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; fastest of {args.rounds} interleaved rounds")
    rows = cpu_scale(args)
    ratio_line(rows, "sa-mlp", "dsa-moe", "CPU scale, fresh models")
    if not args.skip_whole_run:
        whole_run_ratio(args)
    kernels(args)
    if not args.skip_paper:
        paper_scale(args)


if __name__ == "__main__":
    main()
