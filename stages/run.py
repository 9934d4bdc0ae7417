"""DVC stage: train one (study, dataset, model, seed), then predict every exit on the calib and test splits.

    python stages/run.py --study recursive --dataset fashion_mnist --model dsa-moe --seed 0
    torchrun --nproc_per_node=8 stages/run.py --study sparseformer --dataset imagenet200 --model sf-recurrent --seed 0

Reads configs/resolved/DATASET/MODEL/{model,run}.json (stage configure) and data/prepared/DATASET; writes the
run folder runs/STUDY/DATASET/MODEL/seedN/ (see itervision/runs.py). A killed run resumes from its last
checkpoint (checkpoints/...), which is deleted once the run's outputs are complete. Under torchrun only rank 0
evaluates. One process trains and evaluates: a second process would pay the 3 s torch import again.
"""
import os

from _common import run_parser

from itervision.engine.checkpoint import code_fingerprint, remove_checkpoints
from itervision.engine.distributed import cleanup
from itervision.engine.train import train_run
from itervision.errors import cli_entry
from itervision.evaluation.evaluate import evaluate_run
from itervision.layout import prepared_dir, read_resolved
from itervision.runs import RunRecord


@cli_entry
def main(argv=None):
    ap = run_parser(__doc__)
    ap.add_argument("--evaluate-only", action="store_true", help="evaluate the run's existing weights again")
    args = ap.parse_args(argv)
    record = RunRecord(args.study, args.dataset, args.model, args.seed)
    model_json = read_resolved(args.dataset, args.model, "model.json")
    run_json = read_resolved(args.dataset, args.model, "run.json")
    prepared = prepared_dir(args.dataset)
    if not args.evaluate_only:
        try:
            log = train_run(record=record, model_cfg=model_json["config"], train_cfg=run_json["train"],
                            prepared=prepared, progress=not args.quiet)
        finally:
            cleanup()
        if int(os.environ.get("RANK", "0")) != 0:
            return
        record.write_config({**model_json, **run_json, "seed": args.seed, "world_size": log["world_size"],
                             "data": {"fingerprint": log["data_fingerprint"]}, "code": code_fingerprint(),
                             "fingerprint": log["fingerprint"]})
    m = evaluate_run(record, model_json, run_json, prepared)  # metrics.json last: the run is complete
    remove_checkpoints(record.checkpoint_dir)
    if not args.quiet:
        top1 = " ".join(f"{a:.3f}" for a in m["splits"]["test"]["top1_per_exit"])
        print(f"{args.dataset} {args.model} seed {args.seed}: test top-1 per exit {top1}")


if __name__ == "__main__":
    main()
