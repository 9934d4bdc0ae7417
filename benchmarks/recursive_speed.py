"""Benchmark: forward+backward images/s of SA-MLP, SA-MoE and DSA-MoE, at CPU scale and at the paper
configuration (small batch), in one run; time ratio to SA-MLP beside the analytic block MAC ratio.

    python benchmarks/recursive_speed.py [--steps 5] [--paper-batch 8]
Prints figures only; nothing here is a test. The paper reports 165 vs 180 s/epoch (0.92) on an RTX 3090.
"""
import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from itervision.evaluation.accounting import block_mac_ratio, macs_per_step  # noqa: E402
from itervision.models import build_model  # noqa: E402
from itervision.params import model_config  # noqa: E402
from itervision.scales import render_scale  # noqa: E402

MODELS = ("sa-mlp", "sa-moe", "dsa-moe")


def images_per_s(model, batch, steps, warmup=2):
    cfg = model.cfg
    x = torch.randn(batch, cfg.in_chans, cfg.img_size, cfg.img_size)
    y = torch.randint(0, cfg.num_classes, (batch,))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    for i in range(warmup + steps):
        if i == warmup:
            t0 = time.perf_counter()
        out = model(x)
        loss = sum(F.cross_entropy(lg, y) for lg in out["logits"]) / len(out["logits"]) + out["aux_loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
    return batch * steps / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--cpu-batch", type=int, default=64)
    ap.add_argument("--paper-batch", type=int, default=8)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for scale, dataset, batch in (("cpu", "fashion_mnist", args.cpu_batch), ("paper", "cifar10", args.paper_batch)):
        params = render_scale(scale)
        rows = []
        for name in MODELS:
            torch.manual_seed(0)
            model = build_model(model_config(params, name, dataset), 10, 1 if dataset == "fashion_mnist" else 3)
            rows.append((name, images_per_s(model, batch, args.steps), block_mac_ratio(model.cfg),
                         macs_per_step(model.cfg)[-1]))
        base = rows[0][1]
        print(f"\n{scale} scale ({dataset}, batch {batch}, {args.steps} timed steps)")
        print(f"{'model':10s} {'img/s':>9s} {'time ratio':>11s} {'block MAC ratio':>16s} {'MACs/image':>12s}")
        for name, ips, ratio, macs in rows:
            print(f"{name:10s} {ips:9.1f} {base / ips:11.3f} {ratio:16.3f} {macs / 1e6:11.1f}M")


if __name__ == "__main__":
    main()
