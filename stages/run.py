"""DVC stage: train then evaluate one (dataset, model, seed) in one process.

The pipeline's per-run stage: the same calls as stages/train.py and stages/evaluate.py, without paying the
interpreter and library start-up (about 5 s here) twice per run. Under torchrun only rank 0 evaluates.
"""
import os

from _common import run_parser

import evaluate
import train
from itervision.errors import cli_entry


@cli_entry
def main(argv=None):
    args = run_parser(__doc__).parse_args(argv)
    rest = ["--dataset", args.dataset, "--model", args.model, "--seed", str(args.seed), "--params", args.params]
    rest += ["--quiet"] if args.quiet else []
    rest += ["--study", args.study] if args.study else []
    train.main(rest)
    if int(os.environ.get("RANK", "0")) == 0:  # train() has closed the process group by now
        evaluate.main(rest)


if __name__ == "__main__":
    main()
