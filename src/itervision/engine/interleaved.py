"""Time of several models measured as one (stage timing_<study>), so that whatever the machine does over those
minutes falls on every model alike: training time (each model's run from its start: its seed-0 model, batches and
lr schedule, in chunks of steps round-robin in one process), or, for a study whose table is wall-clock per exit,
inference per exit (every model's exits in turn, round after round). A ratio is taken per round (model /
baseline) and summarised over the rounds: two measurements on this machine agree within their intervals where
timings taken from runs spread over half an hour did not (docs/performance.md).

Written here rather than taken from a library: the step is the pipeline's own (engine/recipe.py), and the point is
the interleaving, which no benchmarking library does across several training loops.
"""
from __future__ import annotations

import itertools
import time

import torch

from itervision.data.loaders import describe_prepared, train_batches
from itervision.engine.recipe import SoftTargets, build_optimizer, lr_schedule, step_loss
from itervision.models.registry import build_model


def training_step(model, train, num_classes: int, schedule=None):
    """One training step as stages/run.py takes it (soft targets, every exit's weighted loss, clipping, AdamW);
    `schedule` (step -> lr) sets the lr of each step."""
    opt = build_optimizer(model, train)
    targets = SoftTargets(train, num_classes)
    weights = torch.tensor(model.exit_loss_weights())
    taken = [0]

    def step(img, target):
        if schedule is not None:
            for group in opt.param_groups:
                group["lr"] = schedule(taken[0])
            taken[0] += 1
        img, soft = targets(img, target)
        loss = step_loss(model(img), soft, weights)[0]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train.clip_grad or 1e9)
        opt.step()
    return step


def interleaved_seconds(members: dict, prepared, chunk: int, rounds: int, seed: int = 0) -> dict:
    """{name: [seconds of each chunk]} for members {name: (model config, train config)}: `rounds` rounds, each
    taking the next `chunk` steps of every member in turn (the order rotates every round, so no model always
    follows the same one)."""
    desc = describe_prepared(prepared)
    state = {}
    for name, (config, train) in members.items():
        torch.manual_seed(seed)
        model = build_model(config).train()
        batches = train_batches(prepared, config.img_size, train, train.batching(1), seed=seed)
        total, schedule = lr_schedule(train, len(batches))
        epochs = itertools.chain.from_iterable(batches.epoch(e) for e in itertools.count())  # as long as needed
        state[name] = {"step": training_step(model, train, len(desc["classes"]),
                                             lambda step, f=schedule, t=total: f(min(step, t - 1))),
                       "batches": (b[1:] for b in epochs), "seconds": []}
    names = list(state)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            s = state[name]
            t0 = time.perf_counter()
            for _, (img, target) in zip(range(chunk), s["batches"]):
                s["step"](img, target)
            s["seconds"].append(time.perf_counter() - t0)
    return {name: s["seconds"] for name, s in state.items()}


@torch.inference_mode()
def interleaved_inference(models: dict, img_size_chans: tuple, batch: int, rounds: int, latency_repeats: int,
                          seed: int = 0) -> dict:
    """Wall-clock inference per exit of several models measured as one (stage timing_<study> of an inference
    study): `rounds` rounds; in each, every model in turn (the order rotating) runs each of its exits once on a
    batch of `batch` random images (throughput) and `latency_repeats` times on one image (latency, the median
    kept). {name: {"latency_ms": [[per exit] per round], "images_per_s": [[per exit] per round]}}."""
    import statistics

    from itervision.evaluation.flops import run_to_exit
    from itervision.evaluation.timing import timed_calls

    chans, size = img_size_chans
    big = torch.randn(batch, chans, size, size, generator=torch.Generator().manual_seed(seed))
    built = {}
    for name, config in models.items():
        torch.manual_seed(seed)
        built[name] = build_model(config).eval()
    out = {name: {"latency_ms": [], "images_per_s": []} for name in built}
    names = list(built)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            model, lat, ips = built[name], [], []
            for e in range(model.num_exits):
                def fn(x, model=model, e=e):
                    return run_to_exit(model, x, e)
                ips.append(batch / timed_calls(fn, big, 0, 1)[0])
                lat.append(1e3 * statistics.median(timed_calls(fn, big[:1], 0, latency_repeats)))
            out[name]["latency_ms"].append(lat)
            out[name]["images_per_s"].append(ips)
    return out
