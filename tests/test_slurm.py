"""The campaign on a real SLURM: a single-node cluster on this machine (Debian's slurmctld, slurmd and munge, set
up by tests/slurm_single_node.sh as root), Dask workers as SLURM jobs through dask_jobqueue.SLURMCluster, the
tiny-scale recursive study's runs executed there. The metrics equal the sequential `dvc repro`'s; a worker's job
cancelled with `scancel` mid-run has its run retried, resuming from its checkpoint; jobs that join after the
campaign started get the runs and their (stand-in) GPUs; after a requeue the run resumes and the cluster has its
workers again. Skipped with one line where SLURM cannot be started (not root, no apt)."""
import fcntl
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from helpers import ROOT, make_repo, sh
from test_campaign import ENV, campaign, run_processes

pytestmark = pytest.mark.slow
# One single-node SLURM at a time on this machine: its daemons listen on fixed ports and share one munged, so a second
# one (the other SLURM test on another pytest-xdist worker) talks to the first one's controller, and the first to stop
# kills munged under the other, whose jobs then never start (seen: CI's failure, and here). pytest-xdist's
# `--dist loadgroup` did not keep the two tests on one worker (pytest 9.2, xdist 3.8.0: tested, they ran on gw0 and
# gw1), so the fixture holds a machine-wide lock for as long as its SLURM runs.
SLURM_LOCK = Path(tempfile.gettempdir()) / "itervision-tests-slurm.lock"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    d = tmp_path_factory.mktemp("slurm")
    with open(SLURM_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, however the fixture ends
        r = subprocess.run(["bash", str(ROOT / "tests/slurm_single_node.sh"), "start", str(d)], capture_output=True,
                           text=True, timeout=600)
        if r.returncode == 3:
            pytest.skip(r.stdout.strip().splitlines()[-1])
        assert r.returncode == 0, r.stdout + r.stderr
        conf = r.stdout.strip().splitlines()[-1].split("=", 1)[1]
        old = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = conf  # sbatch, squeue and scancel of dask-jobqueue read it
        try:
            yield conf
        finally:
            subprocess.run(["bash", str(ROOT / "tests/slurm_single_node.sh"), "stop", str(d)], timeout=60)
            if old is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = old


def job_of(pid: int) -> str | None:
    """The SLURM job a process runs in (its SLURM_JOB_ID)."""
    try:
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        return None
    return next((e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"SLURM_JOB_ID=")), None)


def squeue_state(job: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True).stdout.strip()


def slurm_cluster(tmp_path, **extra):
    """dask-jobqueue's SLURMCluster on the test partition: one single-threaded worker per job, running this venv."""
    from dask_jobqueue import SLURMCluster

    return SLURMCluster(cores=1, processes=1, memory="4GB", walltime="00:30:00", queue="test", python=sys.executable,
                        log_directory=str(tmp_path / "logs"), local_directory=str(tmp_path / "dask"),
                        scheduler_options={"dashboard_address": ":0"},  # any free port: no "8787 in use" warning
                        job_script_prologue=[f"export PATH={ENV['PATH']}", "export OMP_NUM_THREADS=1"], **extra)


def test_late_gpu_jobs_get_the_runs_and_a_requeued_job_rejoins_and_resumes(built_repo, tmp_path, slurm):
    """The campaign starts before any SLURM job runs (told that workers hold one GPU); two jobs declaring one
    stand-in GPU each join later and get the runs; one job is requeued with `scontrol requeue` while its run has a
    checkpoint: its run resumes from that checkpoint, the cluster is back to two GPU workers, and the metrics equal
    the sequential `dvc repro`'s."""
    from distributed import Client

    repo = make_repo(tmp_path / "repo")
    cluster = slurm_cluster(tmp_path, worker_extra_args=["--resources", "GPU=1"], job_extra_directives=["--requeue"])
    requeued = []

    def requeue_a_job():  # scontrol requeue the job of a worker whose run has written a checkpoint
        deadline = time.time() + 900
        while time.time() < deadline and not requeued:
            for pid, _, ckpt in run_processes(repo):
                job = job_of(pid)
                if ckpt.exists() and job:
                    subprocess.run(["scontrol", "requeue", job], check=True)  # the job goes back to the queue
                    time.sleep(0.5)
                    if ckpt.exists():
                        requeued.append((job, ckpt))
                    break
            time.sleep(0.05)

    try:
        proc = subprocess.Popen([sys.executable, "-m", "itervision.pipeline.campaign", "--scheduler",
                                 cluster.scheduler_address, "--gpus-per-worker", "1", "--status-minutes", "0.2",
                                 "aggregate_recursive"], cwd=repo, env=ENV, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(5)  # the campaign is running with no worker at all
        cluster.scale(jobs=2)
        watcher = threading.Thread(target=requeue_a_job, daemon=True)
        watcher.start()
        out, err = proc.communicate(timeout=1500)
        watcher.join(timeout=1)
        assert proc.returncode == 0, out[-3000:] + err[-3000:]
        print("\n".join(x for x in out.splitlines() if x.startswith(("[", "  run_")) or "started on" in x))
        assert re.search(r"^\[\d\d:\d\d\] \d+ done, \d+ running, \d+ queued", out, re.M), out[-3000:]
        assert "0 workers joined so far; runs wait for workers of 1 GPUs" in out
        assert requeued, "no job was requeued"
        job, ckpt = requeued[0]
        model, seed = ckpt.parts[-3], ckpt.parts[-2].removeprefix("seed")
        assert f"(resuming {model} seed {seed} at step" in out, out[-3000:]
        assert " 0 failed" in out and " GPU 0" in out
        # the cluster is back to two GPU workers: dask-jobqueue, which manages these jobs, cancels the requeued job
        # once its worker left and starts a replacement job, which joins the same scheduler (an `sbatch --requeue`
        # job of itervision.pipeline.worker, docs/campaign.md, would itself start again and join)
        deadline = time.time() + 300
        with Client(cluster) as client:
            while time.time() < deadline and len(client.scheduler_info()["workers"]) < 2:
                time.sleep(2)
            workers = client.scheduler_info()["workers"].values()
            assert len(workers) == 2 and all(w.get("resources", {}).get("GPU") == 1 for w in workers)
    finally:
        cluster.close()
    ours = json.loads((repo / "metrics/recursive.json").read_text())
    assert ours == json.loads((built_repo / "metrics/recursive.json").read_text())  # the sequential repro's numbers
    assert "up to date" in sh("dvc status aggregate_recursive", repo)


def test_the_campaign_runs_on_slurm_and_a_cancelled_job_resumes_its_run(built_repo, tmp_path, slurm):
    from distributed import Client

    repo = make_repo(tmp_path / "repo")
    cluster = slurm_cluster(tmp_path)
    cancelled = []

    def cancel_a_job():  # scancel the job of a worker whose run has written a checkpoint
        deadline = time.time() + 600
        while time.time() < deadline and not cancelled:
            for pid, _, ckpt in run_processes(repo):
                job = job_of(pid)
                if ckpt.exists() and job:
                    subprocess.run(["scancel", job], check=True)  # the whole job: its worker and its run
                    time.sleep(0.5)
                    if ckpt.exists():  # still there: the run was mid-way, so its retry must resume from it
                        cancelled.append((job, ckpt))
                    break
            time.sleep(0.05)

    try:
        cluster.scale(jobs=2)
        with Client(cluster) as client:
            client.wait_for_workers(2, timeout=180)
        watcher = threading.Thread(target=cancel_a_job, daemon=True)
        watcher.start()
        t0 = time.time()
        r = campaign(repo, "--scheduler", cluster.scheduler_address, "aggregate_recursive")
        watcher.join(timeout=1)
        print(f"SLURM campaign: {time.time() - t0:.0f} s")
    finally:
        cluster.close()
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert cancelled, "no job was cancelled"
    job, ckpt = cancelled[0]
    model, seed = ckpt.parts[-3], ckpt.parts[-2].removeprefix("seed")
    assert f"(resuming {model} seed {seed} at step" in r.stdout, r.stdout[-3000:]  # retried from its checkpoint
    assert " 0 failed" in r.stdout
    ours = json.loads((repo / "metrics/recursive.json").read_text())
    assert ours == json.loads((built_repo / "metrics/recursive.json").read_text())  # the sequential repro's numbers
    assert "up to date" in sh("dvc status aggregate_recursive", repo)
