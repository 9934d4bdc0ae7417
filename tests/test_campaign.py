"""The campaign on real Dask workers at the tiny scale: the same metrics as the sequential `dvc repro` of the
session's repository, DVC recording every stage (`dvc status` clean, `dvc repro` runs nothing), a worker killed
with kill -9 mid-run, a cluster of separately started `dask scheduler` / `dask worker` processes (two runs, the
same predictions), and a failing stage that stops its dependents."""
import json
import os
import re
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


def start_scheduler(tmp_path) -> tuple[subprocess.Popen, str]:
    sched_file = tmp_path / "scheduler.json"
    proc = subprocess.Popen([str(BIN / "dask"), "scheduler", "--port", "0", "--dashboard-address", ":0",
                             "--scheduler-file", str(sched_file)], env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 60
    while not sched_file.exists() and time.time() < deadline:
        time.sleep(0.2)
    return proc, json.loads(sched_file.read_text())["address"]


def gpu_worker(address: str, gpus: int) -> subprocess.Popen:
    """A worker as a cluster node starts it (itervision.pipeline.worker), declaring `gpus` stand-in GPUs."""
    return subprocess.Popen([PY, "-m", "itervision.pipeline.worker", "--scheduler", address, "--gpus", str(gpus)],
                            env={**ENV, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def test_gpu_workers_that_join_late_get_the_waiting_runs_side_by_side(built_repo, tmp_path):
    """The campaign starts with no worker (SLURM jobs still queued), told that workers hold one GPU each; two
    one-(stand-in)-GPU workers join 20 s later. Every run got a GPU instead of running without one, the two
    runs went one to each worker's GPU at the same time, each 'done' line says the run computed on the CPU (no
    CUDA here), and the predictions equal the sequential `dvc repro`'s. A run placed on 2 processes cannot fit
    a one-GPU worker: refused in one line."""
    repo = make_repo(tmp_path / "repo")
    runs = ["run_sparseformer@fashion_mnist-sf-static-9-0", "run_sparseformer@fashion_mnist-sf-recurrent-0"]
    scheduler, address = start_scheduler(tmp_path)
    workers = []
    try:
        def join_later():
            time.sleep(20)
            workers.extend(gpu_worker(address, 1) for _ in range(2))

        joiner = threading.Thread(target=join_later, daemon=True)
        joiner.start()
        r = campaign(repo, "--scheduler", address, "--gpus-per-worker", "1", "--status-minutes", "0.1", *runs)
        joiner.join(timeout=1)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert "0 workers joined so far; runs wait for workers of 1 GPUs" in r.stdout
        done = [line for line in r.stdout.splitlines() if "run_sparseformer@" in line and ": done in" in line]
        assert sorted(line.rsplit(" GPU ", 1)[1].split()[0] for line in done) == ["0", "0"], r.stdout
        assert len({line.split(" on ")[1].split(" GPU")[0] for line in done}) == 1  # this host
        assert all("ran on the CPU: no CUDA" in line for line in done), done
        assert "at most 2 GPU stages at once" in r.stdout  # side by side
        assert re.search(r"\[\d\d:\d\d\] \d+ done, \d+ running, \d+ queued", r.stdout), r.stdout
        assert sorted(p.name for p in (repo / "logs/campaign").glob("run_sparseformer*.log")) == \
            sorted(f"{x}.log" for x in runs)
        for model in ("sf-static-9", "sf-recurrent"):
            ours, theirs = (np.load(root / f"runs/sparseformer/fashion_mnist/{model}/seed0/predictions.npz")
                            for root in (repo, built_repo))
            assert all(np.array_equal(ours[k], theirs[k]) for k in ours.files), model
        params = repo / "params.yaml"
        params.write_text(params.read_text().replace("  placement: {}", "  placement: {fashion_mnist/sf-static-9: 2}"))
        r = campaign(repo, "--scheduler", address, "--gpus-per-worker", "1", runs[0])  # sf-static-9 now on 2
        assert r.returncode == 2
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and "needs 2 GPUs (params run.gpus / run.placement) and workers hold 1" \
            in lines[0], r.stderr
        assert (repo / "runs/sparseformer/fashion_mnist/sf-static-9/seed0/metrics.json").exists()  # kept
    finally:
        for p in [scheduler, *workers]:
            os.killpg(p.pid, signal.SIGKILL)


def test_a_stalled_run_is_killed_and_resumes_from_its_checkpoint(built_repo, tmp_path):
    """A run stopped with SIGSTOP (a hung collective looks the same from outside: alive, silent) stops beating
    its heartbeat; the campaign's watchdog kills it after --stall-minutes, says so with the log's place, and runs
    it once more, which resumes from its checkpoint; the metrics equal the sequential repro's."""
    repo = make_repo(tmp_path / "repo")
    stopped = []

    def stop_a_run():
        deadline = time.time() + 600
        while time.time() < deadline and not stopped:
            for pid, _, ckpt in run_processes(repo):
                if ckpt.exists():
                    os.kill(pid, signal.SIGSTOP)
                    if ckpt.exists():  # mid-way (a finished run deletes it): its retry must resume from it
                        stopped.append(ckpt)
                    break
            time.sleep(0.05)

    watcher = threading.Thread(target=stop_a_run, daemon=True)
    watcher.start()
    r = campaign(repo, "--workers", "2", "--stall-minutes", "0.5", "aggregate_recursive")
    watcher.join(timeout=1)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert stopped, "no run was stopped"
    model, seed = stopped[0].parts[-3], stopped[0].parts[-2].removeprefix("seed")
    assert "stalled: no heartbeat for 0.5 min; killed" in r.stdout and "retrying once (log: " in r.stdout
    assert f"(resuming {model} seed {seed} at step" in r.stdout, r.stdout
    assert json.loads((repo / "metrics/recursive.json").read_text()) == \
        json.loads((built_repo / "metrics/recursive.json").read_text())
