"""Atomic file writing (temp file in the same folder + rename), guarded reading of files between stages, and the
exclusive lock files that keep two processes off one run or one workspace (without flock: cluster file systems)."""
from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path

import yaml

from itervision.errors import UserError


def remove_stale_temps(path: str | os.PathLike) -> None:
    """Delete temp files an interrupted atomic write of `path` left behind (`.NAME.*.tmp` beside it)."""
    path = Path(path)
    if path.parent.is_dir():
        for stale in path.parent.glob(f".{path.name}.*.tmp"):
            stale.unlink(missing_ok=True)


@contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path next to `path`; rename it onto `path` only if the block succeeds.

    A process killed inside the block leaves its temp file; the next write of the same target removes it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_text(path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def save_torch(path, obj) -> None:
    """torch.save, atomically, through a Python file object, so a failed write is an OSError with its real cause
    (disk full, file-size limit) naming the file, which the commands turn into one line."""
    import torch

    with atomic_path(path) as tmp:
        try:
            with open(tmp, "wb") as f:
                torch.save(obj, f)
        except RuntimeError as err:  # torch's zip writer may still report a failed write as a RuntimeError
            raise OSError(28, f"writing failed: {str(err).splitlines()[0][:160]}", str(path)) from None


def write_npz(path, arrays: dict, compress: bool = False) -> None:
    """np.savez(_compressed), atomically and byte-reproducibly: numpy stamps every member of the zip with the
    time of writing (no option turns that off), so the same arrays written twice differed and DVC reran every
    stage downstream. Here each member carries the zip format's earliest date instead; np.load reads it as usual."""
    import zipfile

    import numpy as np

    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with atomic_path(path) as tmp:
        with zipfile.ZipFile(tmp, "w", compression=method, allowZip64=True) as zf:
            for name, value in arrays.items():
                info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = method
                with zf.open(info, "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)


def write_json(path, obj) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(obj):
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def finite_or_none(obj):
    """NaN and infinities -> None, recursively (strict JSON for tools such as `dvc metrics`)."""
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {k: finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_none(v) for v in obj]
    return obj


def read_json_file(path, fix: str, required: tuple = ()) -> dict:
    """A JSON object from a file another stage wrote; a missing, truncated or incomplete file is one line that
    names the file and `fix` (how to regenerate it)."""
    path = Path(path)
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise UserError(f"{path} is missing; {fix}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path} is not valid JSON ({type(err).__name__} at char "
                        f"{getattr(err, 'pos', '?')}); {fix}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} does not hold a JSON object; {fix}")
    missing = [k for k in required if k not in data]
    if missing:
        raise UserError(f"{path} lacks '{missing[0]}'; {fix}")
    return data


def read_json(path):
    with open(path) as f:
        return json.load(f)


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load, except that a mapping repeating a key is an error (PyYAML keeps the last value silently;
    DVC's parser refuses the file, so the two would read different params)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key] + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def load_yaml(text: str, source: str):
    """Parse YAML text safely (plain data only, repeated keys refused); a problem is one UserError line naming
    `source` and the line."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        what = getattr(err, "problem", None) or "invalid syntax"
        raise UserError(f"{source} is not valid YAML{where}: {what}; fix it") from None


def read_yaml(path):
    with open(path) as f:
        return load_yaml(f.read(), str(path))


def write_yaml(path, obj) -> None:
    write_text(path, yaml.safe_dump(obj, sort_keys=False, default_flow_style=None, width=110))


def fresh_temp_dir(out: str | os.PathLike) -> Path:
    """An empty `.NAME.tmp` folder beside `out` (a leftover of an interrupted run is removed first)."""
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def commit_dir(tmp: str | os.PathLike, out: str | os.PathLike) -> None:
    """Put a finished temp folder in place of `out`, so a reader never sees a half-written folder."""
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    Path(tmp).rename(out)


def _process_start(pid: int) -> str | None:
    """The start time of process `pid` on this host (field 22 of /proc/PID/stat), None when it is gone: with the
    PID it names one process, even after the PID is reused."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _lock_owner(path: Path) -> dict | None:
    try:
        owner = json.loads(path.read_text())
        return owner if isinstance(owner, dict) else {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # not a lock this code wrote (a hand-made or foreign file): treated as stale


def _stale(owner: dict) -> bool:
    """A lock whose holder is gone: on this host, its process no longer runs (or its PID now names another
    process). A holder on another host cannot be checked from here, so its lock stands."""
    if not owner.get("host") or not owner.get("pid"):
        return True
    if owner["host"] != socket.gethostname():
        return False
    return _process_start(int(owner["pid"])) != owner.get("start")


@contextmanager
def exclusive_lock(path: str | os.PathLike, holder: str, refusal):
    """Hold an exclusive lock on the file `path` for the block, the file naming its holder (`holder`, e.g. a
    command and PID, plus this host and process); when another live process holds it, raise
    UserError(refusal(its holder)) at once.

    Written by hand because `fcntl.flock` is not a lock on every cluster file system (Lustre mounted without
    `flock` returns an error, BeeGFS locks per node) and no well-kept library offers a lock that works there
    without a server: the lock is the atomic creation of a hard link to a complete file (atomic on NFS, Lustre,
    BeeGFS and local disks), naming host, PID and the process's start time. A lock whose process is gone (killed
    with -9, a node rebooted on this host) is stale and taken over; one held on another host stands until that
    process ends or someone deletes the file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    mine = {"holder": holder, "host": socket.gethostname(), "pid": pid, "start": _process_start(pid)}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(mine, f)
        for _ in range(3):
            try:
                os.link(tmp, path)
                break
            except FileExistsError:
                owner = _lock_owner(path)
                if owner is None:  # released meanwhile
                    continue
                if not _stale(owner):
                    where = "" if owner.get("host") == mine["host"] else f" on host {owner.get('host')}"
                    raise UserError(refusal(f"{owner.get('holder', 'another process')}{where}")) from None
                _take_over(path, owner)
        else:
            raise UserError(refusal(f"another process (the lock {path} changed hands while being taken)"))
    finally:
        os.unlink(tmp)
    try:
        yield
    finally:
        if _lock_owner(path) == mine:
            path.unlink(missing_ok=True)


def _take_over(path: Path, stale: dict) -> None:
    """Remove a stale lock, unless another process replaced it meanwhile: the file is first renamed to a name of
    this process's own (atomic), then read again; a lock that is no longer the stale one is put back."""
    grave = path.with_name(f".{path.name}.{os.getpid()}.stale")
    try:
        os.rename(path, grave)
    except FileNotFoundError:
        return
    if _lock_owner(grave) == stale:
        grave.unlink(missing_ok=True)
        return
    try:
        os.link(grave, path)  # a live lock taken by mistake: back in place (unless a third process holds it now)
    except FileExistsError:
        pass
    grave.unlink(missing_ok=True)
