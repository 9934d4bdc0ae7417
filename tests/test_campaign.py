"""The campaign on real Dask workers at the tiny scale: the same metrics as the sequential `dvc repro` of the
session's repository, DVC recording every stage (`dvc status` clean, `dvc repro` runs nothing), a worker killed
with kill -9 mid-run, a cluster of separately started `dask scheduler` / `dask worker` processes (two runs, the
same predictions), and a failing stage that stops its dependents."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import BIN, make_repo, sh

pytestmark = pytest.mark.slow
PY = sys.executable
ENV = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1"}


def campaign(repo, *args, timeout=900):
    return subprocess.run([PY, "-m", "itervision.pipeline.campaign", *args], cwd=repo, capture_output=True, text=True,
                          timeout=timeout, env=ENV)


def run_processes(repo) -> list[tuple[int, int, Path]]:
    """(pid, parent pid, checkpoint path) of every `stages/run.py` process working in `repo`."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = [c.decode() for c in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")]
            cwd = os.readlink(f"/proc/{pid}/cwd")
            ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if any(c.endswith("stages/run.py") for c in cmd) and cwd == str(repo):
            arg = {k: cmd[cmd.index(k) + 1] for k in ("--study", "--dataset", "--model", "--seed")}
            ckpt = (repo / "checkpoints" / arg["--study"] / arg["--dataset"] / arg["--model"] / f"seed{arg['--seed']}"
                    / "last.pt")
            out.append((int(pid), ppid, ckpt))
    return out


def test_two_local_workers_give_the_sequential_metrics_and_survive_a_killed_worker(built_repo, tmp_path):
    repo = make_repo(tmp_path / "repo")
    killed = []

    def kill_a_worker():  # kill -9 the Dask worker process of a run that has written a checkpoint
        deadline = time.time() + 600
        while time.time() < deadline and not killed:
            for _, worker, ckpt in run_processes(repo):
                if ckpt.exists():
                    assert b"multiprocessing" in open(f"/proc/{worker}/cmdline", "rb").read()  # a Dask worker
                    os.kill(worker, signal.SIGKILL)
                    if ckpt.exists():  # still there: the run was mid-way (a finished run deletes it), so its retry
                        killed.append(ckpt)  # must resume from it
                    break
            time.sleep(0.05)

    watcher = threading.Thread(target=kill_a_worker, daemon=True)
    watcher.start()
    r = campaign(repo, "--workers", "2", "aggregate_recursive")
    watcher.join(timeout=1)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert killed, "no run was killed"
    assert "campaign on 2 local Dask workers" in r.stdout and " 0 failed" in r.stdout
    model, seed = killed[0].parts[-3], killed[0].parts[-2].removeprefix("seed")
    assert f"(resuming {model} seed {seed} at step" in r.stdout, r.stdout  # run again from its checkpoint
    ours = json.loads((repo / "metrics/recursive.json").read_text())
    assert ours == json.loads((built_repo / "metrics/recursive.json").read_text())  # bit-identical to `dvc repro`
    assert "up to date" in sh("dvc status aggregate_recursive", repo)
    assert "Running stage" not in sh("dvc repro aggregate_recursive", repo)
    assert not list((repo / "runs").rglob(".*.tmp"))  # no staging folder left behind


def test_a_real_dask_cluster_runs_the_campaign(built_repo, tmp_path):
    """A scheduler and two workers started as their own processes (what a SLURM job script starts)."""
    repo = make_repo(tmp_path / "repo")
    sched_file = tmp_path / "scheduler.json"
    procs = [subprocess.Popen([str(BIN / "dask"), "scheduler", "--port", "0", "--dashboard-address", ":0",
                               "--scheduler-file", str(sched_file)], env=ENV, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)]
    try:
        deadline = time.time() + 60
        while not sched_file.exists() and time.time() < deadline:
            time.sleep(0.2)
        address = json.loads(sched_file.read_text())["address"]
        for _ in range(2):
            worker = [str(BIN / "dask"), "worker", address, "--nthreads", "1", "--nworkers", "1", "--no-dashboard",
                      "--memory-limit", "0"]
            procs.append(subprocess.Popen(worker, env={**ENV, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True))
        runs = ["run_sparseformer@fashion_mnist-sf-static-9-0", "run_sparseformer@fashion_mnist-sf-recurrent-0"]
        r = campaign(repo, "--scheduler", address, *runs)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert f"Dask scheduler {address}" in r.stdout
        assert "campaign: 4 stages ran" in r.stdout  # configure, the subset and the two runs
        for model in ("sf-static-9", "sf-recurrent"):  # the same predictions as the sequential `dvc repro`
            ours, theirs = (np.load(root / f"runs/sparseformer/fashion_mnist/{model}/seed0/predictions.npz")
                            for root in (repo, built_repo))
            assert sorted(ours.files) == sorted(theirs.files)
            assert all(np.array_equal(ours[k], theirs[k]) for k in ours.files), model
        assert "up to date" in sh(" ".join(["dvc status"] + [f"pipelines/sparseformer/dvc.yaml:{r}" for r in runs]),
                                  repo)
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)


def test_a_failing_stage_stops_its_dependents_with_one_line(tmp_path):
    repo = make_repo(tmp_path / "repo")
    params = repo / "params.yaml"
    params.write_text(params.read_text().replace("global_batch: 16", "global_batch: 0"))
    r = campaign(repo, "--workers", "1", "aggregate_recursive")
    assert r.returncode == 2
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: stage configure failed: error: params key "
                                                   "'train.global_batch' = 0"), r.stderr
    assert "run_recursive" not in r.stdout.replace("not run after a failure", "")
    assert not (repo / "runs").exists()


def test_one_gpu_workers_run_two_runs_side_by_side_and_a_run_too_wide_is_refused(built_repo, tmp_path):
    """--gpus 2 --gpus-per-worker 1 on this CPU machine: two workers of one (stand-in) GPU each, CUDA_VISIBLE_DEVICES
    0 and 1. The two one-process runs go one to each device at the same time, and their predictions equal the
    sequential `dvc repro`'s. A run placed on 2 processes cannot fit a one-GPU worker: refused in one line."""
    repo = make_repo(tmp_path / "repo")
    runs = ["run_sparseformer@fashion_mnist-sf-static-9-0", "run_sparseformer@fashion_mnist-sf-recurrent-0"]
    r = campaign(repo, "--gpus", "2", "--gpus-per-worker", "1", *runs)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "campaign on 2 local Dask workers x 1 GPUs" in r.stdout
    devices = {line.split(": done")[0].split(":")[-1]: line.rsplit("on GPU ", 1)[1].split()[0]
               for line in r.stdout.splitlines() if "run_sparseformer@" in line and ": done in" in line}
    assert sorted(devices.values()) == ["0", "1"], r.stdout  # one run on each device
    assert "at most 2 GPU stages at once" in r.stdout  # side by side
    for model in ("sf-static-9", "sf-recurrent"):
        ours, theirs = (np.load(root / f"runs/sparseformer/fashion_mnist/{model}/seed0/predictions.npz")
                        for root in (repo, built_repo))
        assert all(np.array_equal(ours[k], theirs[k]) for k in ours.files), model
    params = repo / "params.yaml"
    params.write_text(params.read_text().replace("  placement: {}", "  placement: {fashion_mnist/sf-static-9: 2}"))
    r = campaign(repo, "--gpus", "2", "--gpus-per-worker", "1", runs[0])  # sf-static-9 now on 2
    assert r.returncode == 2
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "needs 2 GPUs (params run.gpus / run.placement) and the largest worker has 1" \
        in lines[0], r.stderr
    assert (repo / "runs/sparseformer/fashion_mnist/sf-static-9/seed0/metrics.json").exists()  # kept: nothing ran
