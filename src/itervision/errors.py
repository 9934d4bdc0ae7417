"""User-facing errors: one readable line that names the cause and the fix, no traceback."""
from __future__ import annotations

import functools
import sys


class UserError(Exception):
    """A mistake the user can fix (missing dataset, malformed params, unknown model, ...)."""


def cli_entry(main):
    """Wrap a stage's main(): a UserError becomes one line on stderr and exit status 2."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)

    return wrapper
