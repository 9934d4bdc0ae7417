"""User-facing errors: one readable line that names the cause and the fix, no traceback."""
from __future__ import annotations

import argparse
import errno
import functools
import os
import sys


class UserError(Exception):
    """A mistake the user can fix (missing dataset, malformed params, unknown model, ...)."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with a bad argument reported in one line (argparse prints the usage block first)."""

    def error(self, message):
        print(f"error: {message}; see `{self.prog} --help`", file=sys.stderr)
        sys.exit(2)


# exit status of a command stopped by Ctrl-C (128 + SIGINT), as shells report it
INTERRUPTED = 130

_WRITE_FIXES = {
    errno.ENOSPC: "free some disk space",
    errno.EDQUOT: "free some disk space (quota)",
    errno.EFBIG: "raise the file-size limit (ulimit -f)",
    errno.EACCES: "make it writable",
    errno.EPERM: "make it writable (chattr -i, permissions)",
    errno.EROFS: "use a writable file system",
}


def describe_os_error(err: OSError) -> str:
    """'cannot write PATH (No space left on device); free some disk space, then rerun' and the like."""
    path = err.filename or "a file"
    reason = err.strerror or type(err).__name__
    fix = _WRITE_FIXES.get(err.errno, "check the path and its permissions")
    return f"cannot access {path} ({reason}); {fix}, then rerun the command"


def cli_entry(main):
    """Wrap a command's main(): a UserError or an OS error (disk full, unwritable folder) becomes one line on
    stderr and exit status 2; Ctrl-C becomes one line and status 130. Nothing is marked complete by a command that
    ends this way (every output is written atomically, and a run's metrics.json last)."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
        except OSError as err:
            print(f"error: {describe_os_error(err)}", file=sys.stderr)
            sys.exit(2)
        except KeyboardInterrupt:
            print("error: interrupted (Ctrl-C); nothing was recorded as complete: rerun the command to continue "
                  "(a training run resumes from its last checkpoint)", file=sys.stderr, flush=True)
            # no interpreter teardown, where a second Ctrl-C or a library's exit hook could print a traceback
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(INTERRUPTED)

    return wrapper
