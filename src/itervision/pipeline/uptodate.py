"""The no-op `make repro` without DVC: a stamp of the workspace as it was when `dvc status` last found it clean.

`dvc status` decides "up to date" from the dvc.yaml and dvc.lock files, the params files, and the size, mtime and
inode of every dependency and output (its state database turns those into hashes it compares with the lock).
Starting DVC and building its index costs about 5 s on a 2-core machine, every time. So after a `dvc status`
that came back clean, `record` writes down what it looked at: the bytes of the pipeline's control files
(dvc.yaml, dvc.lock, params.yaml, .dvcignore, the DVC config) and the size, mtime and inode of every dependency
and output path DVC listed (each file of a folder). `still_clean` recomputes that without importing DVC: the same
control bytes and the same file states mean the status DVC would compute is the clean one it computed then (a
file rewritten with the same size within the same mtime tick fools this stamp exactly as it fools DVC's own state
database). Anything different — one byte of a lock file, a touched source file, an output removed, a new file in
an output folder, another DVC version — and the caller asks DVC again.

No library does this: DVC has no "unchanged since the last status" shortcut of its own (each `dvc status` rebuilds
its index from the YAML files).
"""
from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path

from itervision.io import write_text

STAMP = Path(".dvc/tmp/itervision-clean.json")


def control_files(root: Path) -> list[Path]:
    """The files that define the pipeline and DVC's view of it: a changed byte in any of them changes the stages."""
    named = ["dvc.yaml", "dvc.lock", "params.yaml", ".dvcignore", ".dvc/config", ".dvc/config.local"]
    pipelines = sorted((root / "pipelines").glob("*/dvc.*"))
    return [root / n for n in named] + pipelines


def _control_digest(root: Path) -> str:
    h = hashlib.sha256()
    h.update(f"dvc {metadata.version('dvc')}\n".encode())  # another DVC may judge the same files otherwise
    h.update(f"{root.resolve()}\n".encode())  # a copy of the workspace has its own files: it asks DVC once
    for path in control_files(root):
        h.update(f"{path.relative_to(root).as_posix()}\n".encode())
        h.update(path.read_bytes() if path.is_file() else b"<absent>")
    return h.hexdigest()


def _entry(path: str) -> str:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"{path} absent\n"
    return f"{path} {st.st_size} {st.st_mtime_ns} {st.st_ino}\n"


def _files_digest(paths: list[str]) -> str:
    """The size, mtime and inode of every path, and of every file and folder under a folder path (a file added
    to an output folder changes it)."""
    h = hashlib.sha256()
    for path in paths:
        h.update(_entry(path).encode())
        if os.path.isdir(path):
            for top, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files) + dirs:
                    h.update(_entry(os.path.join(top, name)).encode())
    return h.hexdigest()


def tracked_paths(repo) -> list[str]:
    """Every dependency and output path of every stage of an open DVC repository (params files included)."""
    return sorted({str(o.fs_path) for s in repo.index.stages for o in [*s.deps, *s.outs]})


def snapshot(repo, root: Path = Path(".")) -> dict:
    """The stamp of the workspace now, with the paths DVC tracks and the default remote (name, url), taken before
    DVC's status is asked (so a change made while DVC looks never hides behind the stamp)."""
    from itervision.pipeline.remote import default_remote

    paths = tracked_paths(repo)
    return {"control": _control_digest(root), "files": _files_digest(paths), "paths": paths,
            "remote": list(default_remote(repo))}


def record(stamp: dict, root: Path = Path(".")) -> None:
    """Keep a snapshot taken just before a `dvc status` that came back clean."""
    write_text(root / STAMP, json.dumps(stamp) + "\n")


def forget(root: Path = Path(".")) -> None:
    (root / STAMP).unlink(missing_ok=True)


def still_clean(root: Path = Path(".")) -> dict | None:
    """The recorded stamp when nothing it covers has changed since (`dvc status` would say up to date), else None."""
    try:
        stamp = json.loads((root / STAMP).read_text())
        if stamp["control"] != _control_digest(root):
            return None
        return stamp if stamp["files"] == _files_digest(stamp["paths"]) else None
    except (OSError, ValueError, KeyError, TypeError):  # no stamp, or one cut short: ask DVC
        return None
