"""DVC stage: evaluate one trained (dataset, model, seed) at every exit on the calib and test splits.

Writes predictions.npz (per image and exit: class, top probability, correct) and metrics.json (per-exit
top-1, per-exit cost, early-exit sweep on both splits, wall-clock per exit, recursive traces).
"""
from _common import run_parser

from itervision.errors import cli_entry
from itervision.evaluation.exits import evaluate_run
from itervision.params import get, load_params, model_config
from itervision.pipeline import prepared_dir, run_dir, study_of


@cli_entry
def main(argv=None):
    args = run_parser(__doc__).parse_args(argv)
    params = load_params(args.params)
    out = run_dir(args.study or study_of(params, args.model), args.dataset, args.model, args.seed)
    m = evaluate_run(model_name=args.model, model_cfg=model_config(params, args.model, args.dataset),
                     eval_cfg=get(params, "evaluate", dict), prepared=prepared_dir(args.dataset),
                     weights=out / "final_weights.pt", out_dir=out, seed=args.seed)
    if not args.quiet:
        top1 = " ".join(f"{a:.3f}" for a in m["splits"]["test"]["top1_per_exit"])
        print(f"{args.dataset} {args.model} seed {args.seed}: test top-1 per exit {top1}")


if __name__ == "__main__":
    main()
