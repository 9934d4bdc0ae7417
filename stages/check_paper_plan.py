"""Plan a scale before training (not a DVC stage; `make paper-plan`): structure, data roots, and the cost and
memory of every planned run (itervision/plan.py says how each figure is made).

    python stages/check_paper_plan.py                 # params.yaml as it is (after `make paper-scale`)
    python stages/check_paper_plan.py --scale paper   # a scale from configs/scales/, params.yaml untouched
    python stages/check_paper_plan.py --fast          # structure, data roots and analytic costs only (seconds)

--fast skips what needs a model built at full size: fvcore counts (SparseFormer GFLOPs, and with them its
runs' cost) and the memory estimate.
"""
import argparse

from itervision.errors import cli_entry
from itervision.params import check_params, load_params
from itervision.plan import check_roots, check_structure, cost_table, plan_runs, published_check
from itervision.scales import render_scale


@cli_entry
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--scale", help="plan configs/scales/NAME.yaml instead of params.yaml")
    ap.add_argument("--fast", action="store_true", help="no fvcore counts, no memory estimate")
    args = ap.parse_args(argv)
    p = check_params(render_scale(args.scale)) if args.scale else load_params(args.params)
    print(f"plan of the {p.scale} scale ({'configs/scales/' + args.scale + '.yaml' if args.scale else args.params})")
    for line in check_structure(p) + check_roots(p):
        print(line)
    if not args.fast:
        print("SparseFormer GFLOPs per exit (fvcore convention) beside the published ones:")
        for line in published_check(p):
            print(line)
    plans = plan_runs(p, memory=not args.fast, fast=args.fast)
    for line in cost_table(plans, args.fast):
        print(line)
    print(f"total: {sum(mp.runs for mp in plans)} training runs; launcher: {p.run.launcher}")


if __name__ == "__main__":
    main()
