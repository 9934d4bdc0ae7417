"""A Dask worker for the campaign on a GPU node: `dask worker` with one task slot per GPU it holds and those GPUs
declared as the resource "GPU", so a node of 8 GPUs runs eight one-GPU runs side by side, or one 8-GPU run, as
the campaign places them (docs/campaign.md). The GPUs are the ones this process sees (CUDA_VISIBLE_DEVICES, as
SLURM sets it for --gres=gpu:N); none: a CPU worker with one slot per --cpu-slots.

    python -m itervision.pipeline.worker --scheduler-file ~/dask.json         # in a SLURM job (sbatch --requeue)
    python -m itervision.pipeline.worker --scheduler tcp://HOST:8786 --gpus 4 # declare 4 (testing: fake GPUs)

A preempted or requeued job runs this command again and the worker joins the same scheduler again; the campaign
submits the run it lost once more and the run resumes from its last checkpoint.
"""
from __future__ import annotations

import os
import socket
import sys

from itervision.errors import ArgumentParser, UserError, cli_entry


def gpu_count() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


def worker_command(gpus: int, cpu_slots: int, name: str, *, scheduler_file: str | None = None,
                   address: str | None = None) -> list[str]:
    """The `dask worker` command line: slots = GPUs (or cpu_slots), the GPUs as the resource "GPU", no memory
    limit (a training run's memory is its own business), one worker process, named after host and job."""
    slots = gpus or cpu_slots
    address = ["--scheduler-file", scheduler_file] if scheduler_file else [address]
    cmd = [sys.executable, "-m", "distributed.cli.dask_worker", *address, "--nthreads", str(slots), "--nworkers", "1",
           "--memory-limit", "0", "--name", name, "--no-dashboard"]
    if gpus:
        cmd += ["--resources", f"GPU={gpus}"]
    return cmd


@cli_entry
def main(argv=None):
    ap = ArgumentParser(prog="python -m itervision.pipeline.worker", description=__doc__.split("\n\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--scheduler-file", help="the scheduler's file (`dask scheduler --scheduler-file F`)")
    where.add_argument("--scheduler", help="the scheduler's address, tcp://HOST:PORT")
    ap.add_argument("--gpus", type=int, help="GPUs to declare (default: those this process sees)")
    ap.add_argument("--cpu-slots", type=int, default=1, help="task slots of a worker without GPUs (default 1)")
    args = ap.parse_args(argv)
    gpus = gpu_count() if args.gpus is None else args.gpus
    if gpus < 0 or args.cpu_slots < 1:
        raise UserError(f"--gpus {gpus} / --cpu-slots {args.cpu_slots}: give GPUs >= 0 and slots >= 1")
    name = f"{socket.gethostname()}-{os.environ.get('SLURM_JOB_ID', os.getpid())}"
    cmd = worker_command(gpus, args.cpu_slots, name, scheduler_file=args.scheduler_file, address=args.scheduler)
    print(f"worker {name}: {gpus} GPUs, {gpus or args.cpu_slots} slots", file=sys.stderr, flush=True)
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    main()
