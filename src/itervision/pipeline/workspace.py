"""One writer of a workspace's pipeline at a time: `make campaign` and `make repro` take an exclusive lock
(.dvc/tmp/itervision.lock, holding the holder's PID and command) for as long as they run; a second one is refused
in one line that names the holder. DVC's own lock is taken per stage and released in between, so two
orchestrators would otherwise interleave (each run trained twice, a stale workspace left behind).

    python -m itervision.pipeline.workspace dvc repro     # run a command holding the lock
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

from itervision.errors import UserError, cli_entry
from itervision.io import exclusive_lock

LOCK = Path(".dvc/tmp/itervision.lock")


@contextlib.contextmanager
def hold(what: str, path: Path = LOCK):
    """The workspace lock for `what` (a command line), or a one-line error naming the process that holds it. The
    lock covers the wrapper and every process it starts: where the holder is gone (killed alone) but a pipeline
    process it started still runs in this workspace (a `dvc repro`, a stage), that process is named and the
    command refused, before anything is written."""
    with exclusive_lock(path, f"`{what}` (PID {os.getpid()})",
                        lambda holder: f"this workspace's pipeline is being run by {holder}; wait for it to finish "
                                       f"(or stop it) before `{what}`"):
        left = pipeline_processes(Path.cwd())
        if left:
            pid, cmd = left[0]
            raise UserError(f"`{cmd[:80]}` (PID {pid}) still runs in this workspace, left behind by a command that "
                            f"was stopped without it; wait for it to finish or stop it (kill {pid}) before `{what}`")
        yield


def pipeline_processes(root: Path) -> list[tuple[int, str]]:
    """(PID, command line) of the processes running this workspace's pipeline (dvc repro / exp run, a stage
    script) whose working folder is `root`, this process and its ancestors excluded. Linux /proc; elsewhere none
    are found."""
    mine, pid = set(), os.getpid()
    while pid > 1 and pid not in mine:  # this process and its ancestors
        mine.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    root = root.resolve()
    out = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            if Path(os.readlink(entry / "cwd")).resolve() != root:
                continue
            args = [a for a in (entry / "cmdline").read_bytes().decode(errors="replace").split("\0") if a]
        except OSError:
            continue
        text = " ".join(args)
        names = [Path(a).name for a in args[:3]]
        if ("dvc" in names and any(w in args for w in ("repro", "exp"))) or any(
                "stages/" in a and a.endswith(".py") for a in args[:3]):
            out.append((int(entry.name), text))
    return sorted(out)


@cli_entry
def main(argv=None):
    command = list(sys.argv[1:] if argv is None else argv)
    if not command:
        raise UserError("give the command to run under the workspace lock, e.g. `dvc repro`")
    with hold(" ".join(command)):
        sys.exit(subprocess.call(command))


if __name__ == "__main__":
    main()
