"""Cost accounting of a named model: `python -m itervision.planning.describe --model NAME [--scale SCALE] --json`.

Prints stored/active parameters and per-exit cumulative cost: for the recursive classifier the analytic
multiply-adds (with fvcore's count beside them), the block MAC ratio and the average sparsity formula; for
SparseFormer models fvcore GFLOPs in the published convention and complete. `--published` adds the published
figures next to ours.
"""
from __future__ import annotations

import argparse
import json
import sys

from itervision.errors import ArgumentParser, cli_entry
from itervision.evaluation.costs import model_costs
from itervision.layout import reference_csv
from itervision.config.matrix import model_datasets, model_spec
from itervision.models.registry import build_model
from itervision.config.params import Params, check_params, load_params, model_config
from itervision.reporting.tables import load_reference
from itervision.config.scales import render_scale


def describe_model(p: Params, model: str, dataset: str | None = None, fvcore: bool = True) -> dict:
    model_config(p, model)  # an unknown model fails here, naming the known ones
    dataset = dataset or model_datasets(p, model)[0]
    spec = model_spec(p, model, dataset)
    out = {"model": model, "dataset": dataset, "config": spec.to_json()["config"]}
    out.update(model_costs(build_model(spec.config), fvcore=fvcore))
    return out


def published(report: dict) -> dict:
    """Published figures for the same model and dataset, where the documents give them."""
    if report["family"] != "sparseformer":
        ref = load_reference(reference_csv("recursive"))
        name = report["model"]
        return {k: ref[("all", name, k)] for k in ("stored_params", "active_params", "block_mac_ratio")
                if ("all", name, k) in ref}
    ref = load_reference(reference_csv("sparseformer"))
    rounds = report["config"]["rounds"]
    ds = report["dataset"]
    if len(rounds) == 1:
        key = (ds, f"static-{rounds[0]}", "gflops")
        return {"gflops_per_exit": [ref.get(key)]}
    prefix = "recurrent" if report["config"]["memory"] else "no-memory"
    return {"gflops_per_exit": [ref.get((ds, f"{prefix} exit {e + 1}", "gflops")) for e in range(len(rounds))]}


@cli_entry
def main(argv=None):
    ap = ArgumentParser(prog="python -m itervision.planning.describe", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a name under `models`, e.g. dsa-moe or sf-recurrent")
    ap.add_argument("--scale", help="cpu, paper or tiny (configs/scales); default: params.yaml as it is")
    ap.add_argument("--dataset", help="dataset whose classes/channels to use (default: the study's first)")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--no-fvcore", action="store_true", help="analytic figures only")
    ap.add_argument("--published", action="store_true", help="add the published figures")
    args = ap.parse_args(argv)
    p = check_params(render_scale(args.scale)) if args.scale else load_params(args.params)
    report = describe_model(p, args.model, args.dataset, fvcore=not args.no_fvcore)
    if args.published:
        report["published"] = published(report)
    if args.json:
        json.dump(report, sys.stdout, indent=2, default=str)
        print()
        return
    print(f"{report['model']} on {report['dataset']}: {report['stored_params'] / 1e6:.3f}M stored, "
          f"{report['active_params'] / 1e6:.3f}M active")
    if report["family"] == "recursive":
        print(f"  MACs/image {report['macs_per_image'] / 1e6:.2f}M, block ratio {report['block_mac_ratio']:.4f}, "
              f"avg sparsity {report['avg_sparsity']:.3f}")
        if "fvcore" in report:
            print(f"  fvcore matmul FLOPs / analytic = {report['fvcore']['matmul_vs_analytic']:.4f}")
    for e, g in enumerate(report.get("gflops_per_exit", [])):
        complete = report.get("gflops_complete_per_exit")
        extra = f", complete {complete[e]:.4f}" if complete else ""
        pub = (report.get("published", {}).get("gflops_per_exit") or [None] * (e + 1))
        pubs = f", published {pub[e]:.3f}" if e < len(pub) and pub[e] else ""
        print(f"  exit {e + 1}: {g:.4f} GFLOPs{extra}{pubs}")


if __name__ == "__main__":
    main()
