"""Atomic training checkpoints that resume only the exact same run.

A checkpoint carries a fingerprint of everything that shapes training: the resolved model and train
configuration, the seed and world size, the prepared data's content hash (from its manifest) and a hash of
the code that trains: the source of every itervision module the training process has imported (its own model
family, the engine, the data path), so it covers exactly the code the run executes. A checkpoint with another
fingerprint is never resumed: the run starts over. The run stage deletes the checkpoint once the run's outputs
are complete, so a finished run never leaves one behind to be picked up later.

Checkpoints cost the training step little (`CheckpointWriter`): the step waits only while the state is copied to
host memory; the file is written by a background thread into a temp file renamed over the previous checkpoint
once complete, so a process killed mid-write leaves the previous checkpoint in place and usable.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
import threading
import warnings
from pathlib import Path

import torch

from itervision.errors import UserError
from itervision.io import remove_stale_temps, save_torch

PACKAGE = Path(__file__).resolve().parents[1]


def loaded_sources() -> list[Path]:
    """The source files of every itervision module imported in this process, in a fixed order."""
    files = set()
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if (name == "itervision" or name.startswith("itervision.")) and path and path.endswith(".py"):
            files.add(Path(path).resolve())
    return sorted(files)


def code_fingerprint() -> str:
    """Hash of the itervision source this process runs (file names relative to the package, and contents)."""
    digest = hashlib.sha256()
    for f in loaded_sources():
        digest.update(str(f.relative_to(PACKAGE)).encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def run_fingerprint(**parts) -> str:
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def save_checkpoint(path: str | Path, state: dict) -> None:
    save_torch(path, state)


def host_copy(obj):
    """A copy of a (nested) state in host memory that later training steps cannot change: every tensor copied to
    the CPU (a new tensor even when it already is there), everything else as it is (lists and dicts rebuilt)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: host_copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(host_copy(v) for v in obj)
    return obj


class CheckpointWriter:
    """One checkpoint file written in the background at a time. `save` waits for the previous write (if still
    going), copies the state to host memory and returns; `wait` (at the end of training) returns once the last
    write is on disk, and raises what a background write raised (disk full) so that no failure goes unseen."""

    def __init__(self):
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def save(self, path: str | Path, state: dict) -> None:
        self.wait()
        snapshot = host_copy(state)
        self._thread = threading.Thread(target=self._write, args=(Path(path), snapshot), name="checkpoint",
                                        daemon=True)
        self._thread.start()

    def _write(self, path: Path, snapshot: dict) -> None:
        try:
            save_checkpoint(path, snapshot)
        except BaseException as err:  # reported by the next save or wait, in the training thread
            self._error = err

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            raise err


def load_checkpoint(path: str | Path, fingerprint: str) -> dict | None:
    """The checkpoint at `path` if it belongs to this exact run, else None (absent or another fingerprint).
    Stale temp files of interrupted writes are removed."""
    path = Path(path)
    remove_stale_temps(path)
    if not path.exists():
        return None
    try:
        with warnings.catch_warnings():  # torch warns about foreign pickles before it refuses them
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated, foreign or unsafe file
        raise UserError(f"checkpoint {path} is unreadable ({type(err).__name__}); delete it to start the run "
                        f"over (`rm -r {path.parent}`)") from None
    if not isinstance(state, dict) or "fingerprint" not in state:
        raise UserError(f"checkpoint {path} is not a training checkpoint of this project; delete it to start the "
                        f"run over (`rm -r {path.parent}`)")
    return state if state["fingerprint"] == fingerprint else None


def remove_checkpoints(ckpt_dir: str | Path) -> None:
    shutil.rmtree(ckpt_dir, ignore_errors=True)
