"""Plan a scale before training (not a DVC stage; `make paper-plan`): structure, data sources, and the cost and
memory of every planned run (itervision/planning/plan.py says how each figure is made).

    python stages/check_paper_plan.py                       # params.yaml as it is (after `make paper-scale`)
    python stages/check_paper_plan.py --scale paper         # a scale from configs/scales/, params.yaml untouched
    python stages/check_paper_plan.py --gpu nvidia-h200     # hours from benchmarks/results/nvidia-h200.json
    python stages/check_paper_plan.py --fast                # structure, sources and analytic costs (seconds)
    python stages/check_paper_plan.py --gpu nvidia-h200 --write-placement   # run.placement into params.yaml

--gpu names a benchmark result file (written by `make gpu-benchmark` on that GPU): its measured training
images/s give the hours of every configuration it covers; the rest are FLOP estimates, labelled so. --fast skips
what needs a model built at full size: fvcore counts (SparseFormer GFLOPs, and with them its runs' estimate) and
the memory estimate.
"""
import argparse
import sys
from pathlib import Path

from itervision.errors import ArgumentParser, UserError, cli_entry
from itervision.config.params import check_params, load_params
from itervision.planning.plan import (RESULTS, check_sources, check_structure, cost_table, input_lines,
                                     load_input_rates, load_rates, makespan_lines, placement_table, plan_runs,
                                     published_check, summary_lines)
from itervision.config.scales import render_scale
from itervision.planning.placement import write_placement


def check_arguments(args) -> None:
    """Every argument in range before anything is planned (one line each)."""
    import math

    if args.hours is not None and not (math.isfinite(args.hours) and args.hours > 0):
        raise UserError(f"--hours {args.hours} (HOURS) is not a positive number of hours; give e.g. HOURS=30")
    if args.gpus < 1:
        raise UserError(f"--gpus {args.gpus} (GPUS) is not a number of GPUs >= 1; give e.g. GPUS=8")
    if args.cpus_per_gpu is not None and not (math.isfinite(args.cpus_per_gpu) and args.cpus_per_gpu > 0):
        raise UserError(f"--cpus-per-gpu {args.cpus_per_gpu} (CPUS_PER_GPU) is not a positive number of cores")
    if (args.hours is not None or args.write_placement) and not args.gpu:
        raise UserError("--hours and --write-placement plan a placement from measured rates: add --gpu NAME (GPU=)")
    if args.write_placement and args.scale:
        raise UserError(f"--write-placement writes {args.params}, which must hold the planned scale: run "
                        f"`python stages/set_scale.py {args.scale}`, then plan without --scale")


@cli_entry
def main(argv=None):
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--scale", help="plan configs/scales/NAME.yaml instead of params.yaml")
    ap.add_argument("--gpu", help="a GPU with measured rates: benchmarks/results/GPU.json (e.g. nvidia-h200)")
    ap.add_argument("--fast", action="store_true", help="no fvcore counts, no memory estimate")
    ap.add_argument("--hours", type=float, help="with --gpu: widen placements until the campaign ends within H hours")
    ap.add_argument("--gpus", type=int, default=8, help="the GPUs the --hours deadline is planned on (default 8)")
    ap.add_argument("--cpus-per-gpu", type=float, help="CPU cores that feed each GPU: runs whose input path "
                                                        "(benchmarks/results/input-*.json) cannot feed their GPU rate "
                                                        "are planned at the input rate")
    ap.add_argument("--write-placement", action="store_true",
                    help="with --gpu: write the placement into run.placement of --params (params.yaml), which "
                         "`make campaign` then runs")
    args = ap.parse_args(argv)
    check_arguments(args)
    p = check_params(render_scale(args.scale)) if args.scale else load_params(args.params)
    if args.write_placement and p.scale in ("cpu", "tiny"):
        raise UserError(f"{args.params} holds the {p.scale} scale: a GPU placement there would retrain its CPU runs "
                        f"as groups of processes; switch to the paper scale first (`make paper-scale`)")
    rates = None
    if args.gpu:
        rates = load_rates(args.gpu)
        if rates is None:
            known = ", ".join(sorted(f.stem for f in RESULTS.glob("*.json"))) or "none"
            raise UserError(f"no measured rates for GPU '{args.gpu}' ({RESULTS}/{args.gpu}.json; measured: {known}); "
                            f"run `make gpu-benchmark` on that GPU, or plan without --gpu (FLOP estimates)")
    print(f"plan of the {p.scale} scale ({'configs/scales/' + args.scale + '.yaml' if args.scale else args.params})",
          flush=True)
    details = check_structure(p) + check_sources(p)
    if not args.fast:
        print("counting FLOPs and memory with fvcore (about a minute; FAST=1 skips it) ...", file=sys.stderr,
              flush=True)
        details += ["SparseFormer GFLOPs per exit (fvcore convention) beside the published ones:"] + published_check(p)
    inputs = load_input_rates() if args.cpus_per_gpu else None
    plans = plan_runs(p, memory=not args.fast, fast=args.fast, rates=rates, inputs=inputs,
                      cpus_per_gpu=args.cpus_per_gpu)
    for line in summary_lines(plans, args.fast) + details + cost_table(plans, args.fast, rates) \
            + input_lines(plans, inputs, args.cpus_per_gpu) + makespan_lines(plans, args.fast):
        print(line)
    if rates:
        lines, totals = placement_table(p, plans, rates, args.hours, args.gpus)
        for line in lines:
            print(line)
        if args.write_placement:
            target = Path(args.params)
            if args.scale:
                raise UserError(f"--write-placement writes {args.params}, which must hold the planned scale: run "
                                f"`python stages/set_scale.py {args.scale}`, then plan without --scale")
            note = (f"make paper-plan GPU={args.gpu}" + (f" HOURS={args.hours:g} GPUS={args.gpus}" if args.hours else "")
                    + " PLACE=1 (planning/placement.py)")
            import contextlib

            from itervision.pipeline.workspace import hold

            # in a DVC workspace the workspace lock first: params.yaml never changes under a running pipeline
            workspace = Path(".dvc").is_dir() and target.resolve() == Path("params.yaml").resolve()
            with hold("make paper-plan PLACE=1") if workspace else contextlib.nullcontext():
                write_placement(target, totals["placement"], note)
            print(f"wrote run.placement ({len(totals['placement'])} configurations; the rest keep run.gpus "
                  f"{p.run.gpus}) into {target}; `make campaign` runs it")
    elif args.hours is not None or args.write_placement:
        raise UserError("--hours and --write-placement plan a placement from measured rates: add --gpu NAME")
    if rates is None:
        known = ", ".join(sorted(f.stem for f in RESULTS.glob("*.json")))
        if known:
            print(f"hours above are FLOP estimates; measured rates exist for: {known} (--gpu NAME)")
    print(f"total: {sum(mp.runs for mp in plans)} training runs; launcher: {p.run.launcher}")


if __name__ == "__main__":
    main()
