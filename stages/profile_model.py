"""DVC stage: parameters, FLOPs and wall-clock at every exit of one (dataset, model), once per model (not per
seed): runs/STUDY/DATASET/MODEL/profile.json.

    python stages/profile.py --study sparseformer --dataset fashion_mnist --model sf-recurrent

Reads configs/resolved/DATASET/MODEL/{model,profile}.json. Costs come from the analytic accounting and fvcore,
timing from the initialised model on random images, so this stage does not wait for training and a
timing-only change (e.g. profile.latency_repeats) retrains nothing.
"""
import argparse

from itervision.errors import cli_entry
from itervision.evaluation.profile import profile_model
from itervision.layout import read_resolved
from itervision.runs import write_profile


@cli_entry
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--study", required=True, choices=("recursive", "sparseformer"))
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args(argv)
    prof = profile_model(read_resolved(args.dataset, args.model, "model.json"),
                         read_resolved(args.dataset, args.model, "profile.json"))
    write_profile(args.study, args.dataset, args.model, prof)


if __name__ == "__main__":
    main()
