"""`make demo`: the whole pipeline at the tiny scale in a few minutes, in a copy of this checkout, so the workspace
(and its CPU-scale results) stays as it is.

    python -m itervision.pipeline.demo [--out /tmp/itervision-demo]

The copy holds the tracked files only, no DVC cache or remote of this workspace; it reads the same Fashion-MNIST
at the tiny scale (16 training images per class, 2 seeds, models a few thousand parameters wide), runs every
stage, and ends with the same files a full run writes: metrics/claims.md, reports/index.html, the tables and
plots. Nothing in it is a result: the tiny scale exists to show the pipeline working end to end.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from itervision.errors import ArgumentParser, UserError, cli_entry


def copy_checkout(dst: Path) -> None:
    """The tracked (and untracked, not ignored) files of this checkout, less the pipeline's outputs."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], capture_output=True, text=True,
                           check=True).stdout.split()
    for f in files:
        generated = f.startswith(("metrics/", "plots/", "configs/resolved/", "reports/")) or f.endswith("dvc.lock")
        if Path(f).is_file() and not generated:
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dst / f)


@cli_entry
def main(argv=None):
    ap = ArgumentParser(prog="python -m itervision.pipeline.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/itervision-demo", help="where the copy goes (replaced if it exists)")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    if out == Path.cwd().resolve() or Path.cwd().resolve() in out.parents:
        raise UserError(f"--out {out} is inside this checkout; give a folder outside it (e.g. /tmp/itervision-demo)")
    if out.exists():
        if not (out / ".itervision-demo").exists():
            raise UserError(f"--out {out} exists and is not an earlier demo; give a new or empty folder")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / ".itervision-demo").write_text("made by make demo\n")
    copy_checkout(out)
    (out / ".dvc" / "config").write_text("[core]\n    analytics = false\n")  # no remote, no shared cache

    def sh(cmd):
        r = subprocess.run(cmd, cwd=out, shell=True)
        if r.returncode:
            raise UserError(f"`{cmd}` failed in {out} (exit {r.returncode})")

    sh("git init -q && git add -A && git -c user.email=demo@local -c user.name=demo commit -qm demo")
    sh(f"{sys.executable} stages/set_scale.py tiny")
    t0 = time.monotonic()
    sh(f"PATH={Path(sys.executable).parent}:$PATH dvc repro")
    print(f"demo: the tiny scale ran end to end in {time.monotonic() - t0:.0f} s in {out}; open "
          f"{out / 'reports/index.html'} and {out / 'metrics/claims.md'} (no result: the tiny scale shows the "
          f"pipeline working, `make repro` gives the CPU study)")


if __name__ == "__main__":
    main()
