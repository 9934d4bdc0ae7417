"""What a run needs on a cluster node (issue: a campaign a cluster user can start and leave): the CPU pin binds CPU
runs only, hardware knobs stay out of the fingerprint, checkpoints are written in the background and a write
killed half-way leaves the previous one usable, the run lock works without flock and takes over a dead holder's
lock, and the training loop beats a heartbeat for the launcher's stall watch."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from helpers import ROOT, prepare
from test_bad_inputs import run

PY = sys.executable

from itervision.errors import UserError


# ---------------------------------------------------------------------------------------------- the CPU pin

def test_a_gpu_run_is_not_refused_on_a_cpu_without_the_pin(monkeypatch):
    """A CPU without AVX-512 (its flags) refuses a CPU run pinned to AVX-512 in one line naming the setting that
    works there; a run on a GPU gets a note; a pin the CPU lacks is never put in the environment (torch would
    report it, then die on the first AVX-512 instruction: SIGILL, seen on an AMD EPYC)."""
    from itervision.config import run_configs
    from itervision.engine.environment import check_cpu_pin

    monkeypatch.setattr(run_configs, "cpu_flags", lambda: {"avx2", "fma", "sse4_2"})
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")  # as the override would say
    with pytest.raises(UserError, match=r"at AVX2, not the AVX512 .* -S train.cpu_capability=avx2"):
        check_cpu_pin("avx512", "cpu")
    note = check_cpu_pin("avx512", "cuda")
    assert note.startswith("note:") and "computes on the GPU" in note and "\n" not in note
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert check_cpu_pin("avx2", "cpu") is None
    train = dataclasses.replace(_train(), cpu_capability="avx512")
    assert train.cpu_pin_env() == {}
    assert dataclasses.replace(train, cpu_capability="avx2").cpu_pin_env()["ATEN_CPU_CAPABILITY"] == "avx2"
    monkeypatch.setattr(run_configs, "cpu_flags", lambda: {"asimd", "fp"})  # ARM: only native works
    with pytest.raises(UserError, match="train.cpu_capability=native"):
        check_cpu_pin("avx2", "cpu")


def _train():
    from itervision.config.params import load_params, train_config

    p = load_params(ROOT / "params.yaml")
    return train_config(p, "fashion_mnist", "recursive")


def test_hardware_knobs_and_a_gpus_cpu_are_outside_the_fingerprint():
    from itervision.engine.train import training_fingerprint
    from itervision.config.matrix import model_spec
    from itervision.config.params import load_params

    spec = model_spec(load_params(ROOT / "params.yaml"), "sa-mlp", "fashion_mnist")
    t = _train()
    fp = lambda train, device="cpu": training_fingerprint(spec, train, "data", 0, 1, device)  # noqa: E731
    assert fp(t) == fp(dataclasses.replace(t, workers=16, checkpoint_minutes=10))
    assert fp(t) != fp(dataclasses.replace(t, threads=1))  # a CPU run's threads are recipe
    assert fp(t, "cuda") == fp(dataclasses.replace(t, threads=1, cpu_capability="native"), "cuda")
    assert fp(t, "cuda") != fp(t) and fp(t) != fp(dataclasses.replace(t, augment_on="device"))


def test_hardware_knobs_are_not_in_the_runs_dependency(tmp_path):
    """run.json (the run stage's dependency) has no hardware knob; hardware.json holds them and the run reads it."""
    prepare(tmp_path, workers=3, checkpoint_minutes=0.5)
    folder = tmp_path / "configs/resolved/fashion_mnist/sa-mlp"
    assert "workers" not in json.loads((folder / "run.json").read_text())["train"]
    assert json.loads((folder / "hardware.json").read_text()) == {"workers": 3, "checkpoint_minutes": 0.5}
    os.chdir(tmp_path)
    try:
        from itervision.config.specs import read_run_spec

        spec = read_run_spec("fashion_mnist", "sa-mlp")
        assert spec.train.workers == 3 and spec.train.checkpoint_minutes == 0.5
    finally:
        os.chdir(ROOT)


RUN = ["stages/run.py", "--study", "recursive", "--dataset", "fashion_mnist", "--model", "sa-mlp", "--seed", "0",
       "--quiet"]


def sha(path: Path) -> str:
    state = torch.load(path, map_location="cpu", weights_only=True)["model"]
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode() + state[k].numpy().tobytes())
    return h.hexdigest()


@pytest.mark.slow
def test_a_checkpoint_interval_changes_no_weight(tmp_path):
    """Checkpoints at every curve point and epoch end, or time-based (here: at every read of the losses), give the
    same weights and predictions: checkpoints are a hardware knob."""
    hashes = []
    for minutes in (0.0, 1e-6):
        prepare(tmp_path, checkpoint_minutes=minutes)
        r = run(tmp_path, *RUN)
        assert r.returncode == 0, r.stderr[-2000:]
        folder = tmp_path / "runs/recursive/fashion_mnist/sa-mlp/seed0"
        hashes.append((sha(folder / "weights.pt"), (folder / "predictions.npz").read_bytes()))
        subprocess.run(["rm", "-rf", str(tmp_path / "runs")], check=True)
    assert hashes[0] == hashes[1]


# ---------------------------------------------------------------------------------------------- checkpoints

KILLED_WRITER = textwrap.dedent("""
    import sys, time, torch
    from itervision.engine import checkpoint
    from itervision import io

    path = sys.argv[1]
    checkpoint.save_checkpoint(path, {"fingerprint": "f", "step": 1, "w": torch.ones(10)})  # the previous one
    real = torch.save
    def slow(obj, f):  # half the file, then a long pause: the parent kills the process here
        f.write(b"PK" + b"x" * 100000)
        f.flush()
        open(sys.argv[2], "w").close()
        time.sleep(60)
    torch.save = slow
    writer = checkpoint.CheckpointWriter()
    writer.save(path, {"fingerprint": "f", "step": 2, "w": torch.zeros(1000000)})
    for step in range(600):  # training goes on while the checkpoint is written
        time.sleep(0.1)
""")


def test_a_background_checkpoint_killed_half_way_leaves_the_previous_one(tmp_path):
    from itervision.engine.checkpoint import load_checkpoint

    path, started = tmp_path / "last.pt", tmp_path / "writing"
    proc = subprocess.Popen([PY, "-c", KILLED_WRITER, str(path), str(started)], cwd=ROOT)
    try:
        deadline = time.time() + 120
        while not started.exists() and time.time() < deadline:
            time.sleep(0.1)
        assert started.exists() and proc.poll() is None  # the write is under way and the trainer still runs
        temps = list(tmp_path.glob(".last.pt.*.tmp"))
        assert temps and temps[0].stat().st_size > 100000
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    state = load_checkpoint(path, "f")
    assert state["step"] == 1 and torch.equal(state["w"], torch.ones(10))
    assert not list(tmp_path.glob(".last.pt.*.tmp"))  # the next load removed the half-written file


def test_the_writer_copies_the_state_before_training_changes_it(tmp_path):
    from itervision.engine.checkpoint import CheckpointWriter, load_checkpoint

    w = torch.ones(4)
    writer = CheckpointWriter()
    writer.save(tmp_path / "c.pt", {"fingerprint": "f", "w": w, "nested": [{"m": w}]})
    w.add_(5)  # the next optimiser step
    writer.wait()
    state = load_checkpoint(tmp_path / "c.pt", "f")
    assert torch.equal(state["w"], torch.ones(4)) and torch.equal(state["nested"][0]["m"], torch.ones(4))


def test_a_failed_background_write_is_raised_in_the_training_thread(tmp_path):
    from itervision.engine.checkpoint import CheckpointWriter

    (tmp_path / "file").write_text("a file, not a folder")
    writer = CheckpointWriter()
    writer.save(tmp_path / "file" / "c.pt", {"fingerprint": "f"})
    with pytest.raises(OSError):
        writer.wait()
    writer.wait()  # reported once


# ---------------------------------------------------------------------------------------------- the lock

def test_the_lock_works_without_flock(tmp_path, monkeypatch):
    """fcntl.flock raising (Lustre mounted without flock) changes nothing: the lock is a hard link; a second holder
    is refused in one line naming the first, a dead holder's lock is taken over, a lock held on another host
    stands, and the lock file goes when released."""
    import fcntl

    from itervision.io import exclusive_lock

    def no_flock(*a, **k):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    lock = tmp_path / "run.lock"
    refusal = lambda holder: f"held by {holder}"  # noqa: E731
    with exclusive_lock(lock, "first", refusal):
        assert json.loads(lock.read_text())["holder"] == "first"
        with pytest.raises(UserError, match="held by first$"):
            with exclusive_lock(lock, "second", refusal):
                pass
        r = subprocess.run([PY, "-c", "from itervision.io import exclusive_lock\n"
                                      f"with exclusive_lock({str(lock)!r}, 'child', lambda h: 'held by ' + h): pass"],
                           capture_output=True, text=True)
        assert r.returncode != 0 and "held by first" in r.stderr
    assert not lock.exists()
    dead = subprocess.Popen([PY, "-c", "pass"])
    dead.wait()  # a PID whose process is gone (kill -9 of a holder leaves exactly this)
    lock.write_text(json.dumps({"holder": "killed run", "host": os.uname().nodename, "pid": dead.pid, "start": "1"}))
    with exclusive_lock(lock, "after", refusal):
        assert json.loads(lock.read_text())["holder"] == "after"
    lock.write_text(json.dumps({"holder": "a run", "host": "node-17", "pid": 1, "start": "1"}))
    with pytest.raises(UserError, match="held by a run on host node-17"):
        with exclusive_lock(lock, "here", refusal):
            pass
    lock.write_text("")  # a lock file of the flock era, left empty on release: not a holder
    with exclusive_lock(lock, "new", refusal):
        pass


# ---------------------------------------------------------------------------------------------- heartbeat

@pytest.mark.slow
def test_a_run_beats_its_heartbeat_while_it_trains(tmp_path):
    prepare(tmp_path)
    beat = tmp_path / "beat.json"
    r = subprocess.run([PY, str(ROOT / RUN[0]), *RUN[1:]], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "ITERVISION_HEARTBEAT": str(beat)}, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    info = json.loads(beat.read_text())
    assert info["phase"] in ("train", "evaluate", "setup") and info["pid"] > 0 and time.time() - info["time"] < 600
