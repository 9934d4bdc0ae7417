"""Guard against a truncated dvc.lock before DVC reads it: `python -m itervision.pipeline.lockfiles` (make repro and the
campaign run it first).

DVC 3 rewrites a pipeline's dvc.lock in place after every stage (dvc/utils/serialize/_common.py: `open(path,
"w+")`, then the YAML dump), so a kill -9 or Ctrl-C at that moment leaves it empty or cut short, and every later
`dvc repro` or `dvc status` then fails with "validation failed ... required key not provided", naming no fix.
Each lock file is parsed and checked against DVC's own lock-file schema. A broken one that git tracks is
restored from HEAD (what it lost is recorded again: its stages rerun, or are restored from DVC's run cache
when their inputs are unchanged); one that git does not track is named in one line with the fix.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from itervision.errors import UserError, cli_entry
from itervision.io import write_text


def lock_files(root: Path = Path(".")) -> list[Path]:
    return [p for p in [root / "dvc.lock", *sorted((root / "pipelines").glob("*/dvc.lock"))] if p.exists()]


def problem(text: str) -> str | None:
    """Why a lock file's text is not a complete DVC lock file, or None. A file cut short often still parses (DVC
    then silently forgets the stages it lost), so beyond DVC's schema every entry must be whole: the file ends
    with a newline, every stage has its command and at least one dependency or output, and every dependency and
    output has its hash."""
    from dvc.schema import COMPILED_LOCKFILE_SCHEMA

    if not text.strip():
        return "empty"
    if not text.endswith("\n"):
        return "cut short (its last line is incomplete)"
    try:  # libyaml's parser where PyYAML has it: the lock files are large (2 s in pure Python, 0.2 s in C)
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        return f"not valid YAML{f' at line {mark.line + 1}' if mark else ''} (cut short?)"
    try:
        COMPILED_LOCKFILE_SCHEMA(data)
    except Exception as err:  # voluptuous raises its own Invalid types
        return f"not a DVC lock file ({str(err).splitlines()[0][:120]})"
    for name, stage in (data.get("stages") or {}).items():
        if not stage.get("deps") and not stage.get("outs") and not stage.get("params"):
            return f"cut short (stage {name} has no dependency or output)"
        for kind in ("deps", "outs"):
            for entry in stage.get(kind) or []:
                if not any(k in entry for k in ("md5", "etag", "checksum")):
                    return f"cut short (stage {name}: {entry.get('path', '?')} has no hash)"
    return None


def _committed(path: Path, root: Path) -> str | None:
    """The file's text at git HEAD, or None when git does not track it."""
    r = subprocess.run(["git", "show", f"HEAD:./{path.relative_to(root).as_posix()}"], cwd=root, capture_output=True,
                       text=True)
    return r.stdout if r.returncode == 0 else None


def repair(root: Path = Path(".")) -> list[str]:
    """Check every lock file; restore broken tracked ones from HEAD. Returns what was done, one line each;
    raises UserError for a broken lock file that cannot be restored."""
    done = []
    for path in lock_files(root):
        why = problem(path.read_text(errors="replace"))
        if why is None:
            continue
        committed = _committed(path, root)
        if committed is not None and problem(committed) is None:
            write_text(path, committed)
            done.append(f"{path} was {why} (a DVC process stopped while writing it); restored from git HEAD: the "
                        f"stages it had recorded since then rerun or come from DVC's run cache")
            continue
        raise UserError(f"{path} is {why} (a DVC process stopped while writing it) and git has no valid copy; remove "
                        f"it (`rm {path}`): DVC then reruns that pipeline's stages, or restores them from its run "
                        f"cache")
    return done


@cli_entry
def main(argv=None):
    for line in repair():
        print(line, file=sys.stderr)


if __name__ == "__main__":
    main()
