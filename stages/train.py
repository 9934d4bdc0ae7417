"""DVC stage (or torchrun target): train one (dataset, model, seed); resumes from its last checkpoint.

    python stages/train.py --dataset fashion_mnist --model dsa-moe --seed 0
    torchrun --nproc_per_node=8 stages/train.py --dataset imagenet200 --model sf-recurrent --seed 0
Reads params: train, architectures.<arch>, models.<model> (and the study lists only without --study).
"""
from _common import run_parser

from itervision.engine.train import finish, train_run
from itervision.errors import cli_entry
from itervision.params import load_params, model_config, train_config
from itervision.pipeline import checkpoint_dir, prepared_dir, run_dir, study_of


@cli_entry
def main(argv=None):
    args = run_parser(__doc__).parse_args(argv)
    params = load_params(args.params)
    study = args.study or study_of(params, args.model)
    try:
        train_run(model_name=args.model, model_cfg=model_config(params, args.model, args.dataset),
                  train_cfg=train_config(params, args.dataset), prepared=prepared_dir(args.dataset), seed=args.seed,
                  out_dir=run_dir(study, args.dataset, args.model, args.seed),
                  ckpt_dir=checkpoint_dir(study, args.dataset, args.model, args.seed), progress=not args.quiet)
    finally:
        finish()


if __name__ == "__main__":
    main()
