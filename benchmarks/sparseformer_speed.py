"""Benchmark: SparseFormer inference images/s (batch 256) and latency (batch 1) per exit and for the static
models, next to their GFLOPs, at CPU scale and at paper scale (short run), and the achieved FLOP/s as a
fraction of this machine's fp32 matrix-product peak, measured in the same run.

    python benchmarks/sparseformer_speed.py [--paper-batch 32] [--repeats 3]
"""
import argparse
import time

import torch

from itervision.evaluation.flops import count_flops, run_to_exit
from itervision.config.matrix import model_spec
from itervision.models.registry import build_model
from itervision.config.params import check_params
from itervision.config.scales import render_scale


def matmul_peak(n=2048, repeats=5):
    """fp32 matrix-product FLOP/s (2 n^3 per product, multiply and add counted separately)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    t0 = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n ** 3 * repeats / (time.perf_counter() - t0)


@torch.no_grad()
def timed(fn, x, repeats, warmup=1):
    for _ in range(warmup):
        fn(x)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn(x)
    return (time.perf_counter() - t0) / repeats


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu-batch", type=int, default=256)
    ap.add_argument("--paper-batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    peak = matmul_peak()
    print(f"fp32 matmul peak here: {peak / 1e9:.0f} GFLOP/s (2 FLOPs per multiply-add), "
          f"{torch.get_num_threads()} threads")
    for scale, dataset, batch in (("cpu", "fashion_mnist", args.cpu_batch), ("paper", "imagenet200", args.paper_batch)):
        p = check_params(render_scale(scale))
        s = p.sparseformer
        print(f"\n{scale} scale ({dataset}), throughput at batch {batch}, latency at batch 1")
        print(f"{'model':20s} {'exit':>4s} {'GFLOPs':>8s} {'img/s':>9s} {'latency ms':>11s} {'% of peak':>9s}")
        for name in list(s.static) + [s.recurrent]:
            torch.manual_seed(0)
            model = build_model(model_spec(p, name, dataset).config).eval()
            size = model.cfg.img_size
            one = torch.randn(1, model.cfg.in_chans, size, size)
            big = torch.randn(batch, model.cfg.in_chans, size, size)
            for e in range(model.num_exits):
                g = count_flops(model, one, e, complete=True)["flops"] / 1e9
                sec = timed(lambda x: run_to_exit(model, x, e), big, args.repeats)
                lat = timed(lambda x: run_to_exit(model, x, e), one, args.repeats * 5)
                achieved = 2 * g * 1e9 * batch / sec  # complete count, multiply-add = 2 FLOPs like the peak
                print(f"{name:20s} {e + 1:4d} {g:8.4f} {batch / sec:9.1f} {lat * 1e3:11.2f} "
                      f"{100 * achieved / peak:8.1f}%")


if __name__ == "__main__":
    main()
