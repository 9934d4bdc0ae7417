"""One writer of a workspace's pipeline at a time: `make campaign` and `make repro` take an exclusive lock
(.dvc/tmp/itervision.lock, holding the holder's PID and command) for as long as they run; a second one is refused
in one line that names the holder. DVC's own lock is taken per stage and released in between, so two
orchestrators would otherwise interleave (each run trained twice, a stale workspace left behind).

    python -m itervision.pipeline.workspace dvc repro     # run a command holding the lock
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from itervision.errors import UserError, cli_entry
from itervision.io import exclusive_lock

LOCK = Path(".dvc/tmp/itervision.lock")


def hold(what: str, path: Path = LOCK):
    """The workspace lock for `what` (a command line), or a one-line error naming the process that holds it."""
    return exclusive_lock(path, f"`{what}` (PID {os.getpid()})",
                          lambda holder: f"this workspace's pipeline is being run by {holder}; wait for it to finish "
                                         f"(or stop it) before `{what}`")


@cli_entry
def main(argv=None):
    command = list(sys.argv[1:] if argv is None else argv)
    if not command:
        raise UserError("give the command to run under the workspace lock, e.g. `dvc repro`")
    with hold(" ".join(command)):
        sys.exit(subprocess.call(command))


if __name__ == "__main__":
    main()
