"""`make repro` in one process: check params, warn on another stack; when nothing changed since the last clean
`dvc status` (the up-to-date stamp, pipeline/uptodate.py), say so without starting DVC (the no-op path, about a
second); else repair the dvc.lock files and ask `dvc status` once; when it is clean, nothing else runs but the push;
otherwise pull what the remote holds, reproduce under the workspace lock with a "run k of N, elapsed, ETA" line
before every stage that runs, check that `dvc status` is clean after it, push, and close with a summary (stages
run, runs trained, outputs pulled; where the results are).

    python -m itervision.pipeline.repro [--no-push]

The steps and their messages are the ones `make repro` ran as separate commands (params check, lock repair,
provenance, remote pull, `dvc repro`, status check, remote push); one interpreter and one DVC import serve them
all (docs/performance.md has the no-op timing before and after).
"""
from __future__ import annotations

import sys
import time

from itervision.errors import ArgumentParser, UserError, cli_entry

RESULTS = "metrics/claims.md (start here), metrics/, plots/, reports/index.html"


def _status(root: str = ".") -> dict:
    """`dvc status` through DVC's API: {stage: changes} of every stage that is not up to date. A clean status
    leaves the up-to-date stamp (pipeline/uptodate.py) of what DVC looked at, which the next no-op reads instead."""
    from pathlib import Path

    from dvc.repo import Repo

    from itervision.pipeline import uptodate

    with Repo(root) as repo:
        before = uptodate.snapshot(repo, Path(root))
        stale = repo.status()
    if stale:
        uptodate.forget(Path(root))
    else:
        uptodate.record(before, Path(root))
    return stale


def _stages_to_run(repo, stale: dict) -> list[str]:
    """Every stage `dvc repro` will run: the stale ones and everything downstream of them, in run order."""
    import networkx as nx

    graph = repo.index.graph
    by_name = {s.addressing: s for s in graph.nodes}
    start = {by_name[name] for name in stale if name in by_name}
    if not start:
        return sorted(stale)
    reverse = graph.reverse(copy=False)  # DVC's edges point from a stage to the stages it depends on
    todo = set(start)
    for s in start:
        todo |= nx.descendants(reverse, s)
    order = [s for s in reversed(list(nx.topological_sort(graph))) if s in todo]
    return [s.addressing for s in order]


class Progress:
    """The line printed before each stage `dvc repro` runs: its place among the stages to run, the time so far and
    the estimated time left (the mean time of the stages run so far, times the stages left)."""

    def __init__(self, planned: list[str]):
        self.planned, self.started, self.done = planned, time.monotonic(), []

    def skip(self, name: str) -> None:
        """A planned stage DVC will not run (its inputs came out unchanged): off the count."""
        if name in self.planned:
            self.planned = [p for p in self.planned if p != name]

    def before(self, name: str) -> str:
        k = len(self.done) + 1
        n = max(len(self.planned), k)
        elapsed = time.monotonic() - self.started
        eta = "" if not self.done else f", ETA {_clock(elapsed / len(self.done) * (n - k + 1))}"
        self.done.append(name)
        return f"itervision: stage {k} of {n}: {name} (elapsed {_clock(elapsed)}{eta})"


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


def reproduce(progress: Progress) -> list[str]:
    """`dvc repro` through DVC's API, printing progress.before() ahead of every stage planned to run (the stale
    ones and what depends on them); returns the names of the stages DVC ran."""
    from dvc.repo import Repo
    from dvc.repo.reproduce import _reproduce_stage

    planned = set(progress.planned)

    def stage_with_progress(stage, **kwargs):  # DVC's own step (repro_fn), with the progress line before it
        if stage.addressing in planned:
            # downstream of a changed stage is only a maybe: a stage whose inputs came out byte-identical is
            # skipped by DVC, and is then taken off the count instead of announced
            if kwargs.get("force") or stage.changed():
                print(progress.before(stage.addressing), flush=True)
            else:
                progress.skip(stage.addressing)
        return _reproduce_stage(stage, **kwargs)

    with Repo(".") as repo:
        ran = repo.reproduce(repro_fn=stage_with_progress)
    return [s.addressing for s in ran]


PUSHED = ".dvc/tmp/itervision-pushed"  # the dvc.lock digest and remote of the last complete push


def _lock_digest() -> str:
    import hashlib
    from pathlib import Path

    from itervision.pipeline.lockfiles import lock_files

    h = hashlib.sha256()
    for path in lock_files(Path(".")):
        h.update(str(path).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def push_once(remote, default: tuple[str | None, str | None] | None = None) -> str:
    """remote.push(), unless the last push from this workspace went to the same remote at exactly these dvc.lock
    files (then every output they record is there already: asking the remote again costs 3 s of every no-op).
    `default`: the default remote's (name, url) when the caller knows it (the up-to-date stamp records it), so the
    no-op path never imports DVC."""
    from pathlib import Path

    if default is None:
        from dvc.repo import Repo

        try:
            default = remote.default_remote(Repo("."))
        except Exception:  # no DVC repository here, a broken config: push() says what is wrong
            return remote.push()
    name, url = default
    mark = f"{_lock_digest()} {url}"
    path = Path(PUSHED)
    local_gone = url and remote.is_local(url) and not Path(url.removeprefix("file://")).is_dir()
    if url and not local_gone and path.exists() and path.read_text().strip() == mark:
        return f"DVC remote '{name}' ({url}) got every output of these dvc.lock files at the last push: nothing pushed"
    said = remote.push()
    if url and "not reachable" not in said:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(mark + "\n")
    return said


def summary(ran: list[str], pulled: str, seconds: float) -> str:
    runs = [s for s in ran if "run_" in s.split(":")[-1]]
    return (f"itervision: {len(ran)} stages run ({len(runs)} training runs) in {_clock(seconds)}; {pulled}; results: "
            f"{RESULTS}")


def _dvc_logging() -> None:
    """DVC's own messages (stage skipped / running, lock updated) as `dvc repro` prints them."""
    import logging

    from dvc.logger import setup

    if not logging.getLogger("dvc").handlers:  # importing DVC may have set its console up already: not twice
        setup()


@cli_entry
def main(argv=None):
    ap = ArgumentParser(prog="python -m itervision.pipeline.repro", description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-push", action="store_true", help="leave new outputs out of the DVC remote (PUSH=0)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    from itervision.config.params import DEFAULT_PARAMS, load_params
    from itervision.pipeline import lockfiles, provenance, remote, uptodate
    from itervision.pipeline.workspace import hold

    p = load_params(DEFAULT_PARAMS)
    print(f"{DEFAULT_PARAMS}: {p.scale} scale, checked")
    try:
        provenance.main()
    except Exception as err:  # a warning only, never a reason to stop
        print(f"warning: provenance not checked ({type(err).__name__}: {err})", file=sys.stderr)
    with hold("make repro"):
        stamp = uptodate.still_clean()  # nothing changed since the last clean `dvc status`: DVC is not started
        if stamp is None:
            _dvc_logging()
            for line in lockfiles.repair():
                print(line, file=sys.stderr)
            stale = _status()
        if stamp is not None or not stale:  # the no-op path: at most one status call, nothing pulled or run
            print("Data and pipelines are up to date.")
            pulled = "nothing pulled (up to date)"
            ran = []
        else:
            pulled = remote.pull()
            print(pulled)
            from dvc.repo import Repo

            with Repo(".") as repo:
                planned = _stages_to_run(repo, repo.status())
            ran = reproduce(Progress(planned))
            left = _status()
            if left:
                name = next(iter(left))
                raise UserError(f"dvc status is not clean after the run ({len(left)} stages, e.g. {name}): the "
                                "workspace is stale; run make repro again")
            print("Data and pipelines are up to date.")
    if not args.no_push:
        print(push_once(remote, tuple(stamp["remote"]) if stamp else None))
    print(summary(ran, pulled, time.monotonic() - t0))


if __name__ == "__main__":
    main()
