"""DVC stage: train one (study, dataset, model, seed), then predict every exit on the calib and test splits.

    python stages/run.py --study recursive --dataset fashion_mnist --model dsa-moe --seed 0

A run whose recipe takes several processes (params run.gpus / run.placement, its run.json's `world`) starts its own
torchrun group on this node (`torchrun --standalone --nproc_per_node=WORLD stages/run.py ...`); under a launcher of
its own (torchrun across nodes) the launched world size must equal the recipe's.

Reads configs/resolved/DATASET/MODEL/{model,run}.json (stage configure) and data/prepared/DATASET; writes the
run folder runs/STUDY/DATASET/MODEL/seedN/ (see itervision/runs.py) through a staging folder renamed into place
at the end. One process at a time per run (an exclusive lock); a killed run resumes from its last checkpoint
(checkpoints/...), which is deleted once the run's outputs are complete. Under torchrun only rank 0 writes and
evaluates. `--evaluate-only` scores the existing weights again, and refuses when the resolved configuration,
the prepared data or the training code differ from what the weights were trained with.
"""
import contextlib
import os
import sys

from _common import run_parser

from itervision.errors import UserError, cli_entry
from itervision.layout import prepared_dir
from itervision.runs import CONFIG, TRAIN_LOG, WEIGHTS, RunRecord
from itervision.config.specs import read_model_spec, read_run_spec

COMPILE_CACHE = ".cache/torch-compile"
# torch is imported only after the recipe's CPU pin is in the environment (main)


def check_trained_with(record: RunRecord, spec, run, prepared) -> str:
    """--evaluate-only: the run must come from this very configuration, data and training code; returns its
    fingerprint (which its weights must carry)."""
    from itervision.data.loaders import describe_prepared
    from itervision.engine.train import training_fingerprint
    from itervision.models.registry import model_class

    trained = record.config()
    model_class(spec.family)  # the fingerprint covers the model's code, as when it was trained
    now = training_fingerprint(spec, run.train, describe_prepared(prepared)["fingerprint"], record.seed,
                               int(trained.get("world_size", 1)), trained.get("device", "cpu"))
    if trained.get("fingerprint") != now:
        differs = [what for what, a, b in (("model config", trained["config"], spec.to_json()["config"]),
                                           ("train recipe", trained["train"], run.to_json()["train"]))
                   if a != b] or ["prepared data or training code"]
        raise UserError(f"{record.dir} was trained with another {' and '.join(differs)} than configs/resolved and "
                        f"data/prepared hold now; retrain it (`dvc repro {record.stage}`) instead of --evaluate-only")
    return now


@cli_entry
def main(argv=None):
    ap = run_parser(__doc__)
    ap.add_argument("--evaluate-only", action="store_true", help="evaluate the run's existing weights again")
    args = ap.parse_args(argv)
    record = RunRecord(args.study, args.dataset, args.model, args.seed)
    spec, run = read_model_spec(args.dataset, args.model), read_run_spec(args.dataset, args.model)
    os.environ.update(run.train.cpu_pin_env())  # the recipe's pin wins over whatever the caller set
    # compiled graphs cached in one folder of the repository (a shared file system on a cluster), so the runs of one
    # configuration compile once; the caller's own cache folder wins
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.abspath(COMPILE_CACHE))
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")
    if run.world > 1 and "LOCAL_RANK" not in os.environ and not args.evaluate_only:
        # the run's own torchrun group of run.world processes on this node (params run.gpus / run.placement); a
        # campaign gives the command the GPUs it placed there (CUDA_VISIBLE_DEVICES)
        os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                  f"--nproc_per_node={run.world}", os.path.abspath(__file__),
                                  *(sys.argv[1:] if argv is None else argv)])
    from itervision.engine.checkpoint import remove_checkpoints
    from itervision.engine.environment import check_cpu_pin, environment_record
    from itervision.engine.distributed import cleanup, launch_rank
    from itervision.engine.train import train_run
    from itervision.evaluation.evaluate import evaluate_run

    import torch

    note = check_cpu_pin(run.train.cpu_capability, "cuda" if torch.cuda.is_available() else "cpu")
    if note and not args.quiet and launch_rank()[0] == 0:
        print(note, file=sys.stderr)
    launched = launch_rank()[1]
    if launched != run.world and not args.evaluate_only:
        raise UserError(f"{record.stage}: its recipe trains on {run.world} processes (params run.gpus / run.placement) "
                        f"but the launcher started {launched}; run `python stages/run.py` (it starts its own group) or "
                        f"change run.placement")
    prepared = prepared_dir(args.dataset)
    main_rank = launch_rank()[0] == 0
    with record.lock() if main_rank else contextlib.nullcontext():
        staged = None
        try:
            if args.evaluate_only:
                fingerprint = check_trained_with(record, spec, run, prepared)
                staged = record.start_staging(keep=(CONFIG, WEIGHTS, TRAIN_LOG))
            else:
                staged = record.start_staging() if main_rank else record
                try:
                    log = train_run(record=staged, spec=spec, train=run.train, prepared=prepared,
                                    progress=not args.quiet)
                finally:
                    cleanup()
                if not main_rank:
                    return
                staged.write_config({**spec.to_json(), **run.to_json(), "seed": args.seed,
                                     "world_size": log["world_size"], "device": log["device"],
                                     "data": {"fingerprint": log["data_fingerprint"]},
                                     "fingerprint": log["fingerprint"], "environment": environment_record()})
                fingerprint = log["fingerprint"]
            metrics = evaluate_run(staged, spec, run, prepared, fingerprint)  # metrics.json last: the run is complete
            record.commit_staging()
        except BaseException:
            if staged is not None and staged.staging:
                staged.discard()  # nothing half-written stays behind (a resume reads checkpoints only)
            raise
        remove_checkpoints(record.checkpoint_dir)
    if not args.quiet:
        top1 = " ".join(f"{a:.3f}" for a in metrics["splits"]["test"]["top1_per_exit"])
        print(f"{args.dataset} {args.model} seed {args.seed}: test top-1 per exit {top1}")


if __name__ == "__main__":
    main()
