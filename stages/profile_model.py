"""DVC stage: parameters, FLOPs and wall-clock at every exit of one (dataset, model), once per model (not per
seed): runs/STUDY/DATASET/MODEL/profile.json.

    python stages/profile_model.py --study sparseformer --dataset fashion_mnist --model sf-recurrent

Reads configs/resolved/DATASET/MODEL/{model,profile}.json. Costs come from the analytic accounting and fvcore,
timing from the initialised model on random images, so this stage does not wait for training and a
timing-only change (e.g. profile.latency_repeats) retrains nothing.
"""
import argparse

from itervision.errors import ArgumentParser, cli_entry
from itervision.evaluation.profile import profile_model
from itervision.names import name_arg
from itervision.runs import write_profile
from itervision.config.specs import read_model_spec, read_profile_spec


@cli_entry
def main(argv=None):
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--study", required=True, type=name_arg)
    ap.add_argument("--dataset", required=True, type=name_arg)
    ap.add_argument("--model", required=True, type=name_arg)
    args = ap.parse_args(argv)
    prof = profile_model(read_model_spec(args.dataset, args.model), read_profile_spec(args.dataset, args.model))
    write_profile(args.study, args.dataset, args.model, prof)


if __name__ == "__main__":
    main()
