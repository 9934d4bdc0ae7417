import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Under pytest-xdist every worker is a process of its own: one intra-op thread each, so two workers on two cores do
# not run four OpenMP threads that wait on each other (a run's own recipe still sets the threads it trains with).
os.environ.setdefault("OMP_NUM_THREADS", "1" if os.environ.get("PYTEST_XDIST_WORKER") else "2")

TESTS = Path(__file__).resolve().parent
BUILD_TIMEOUT = 1800  # seconds a test waits for the tiny repository before it fails


def _uses_built_repo(item) -> bool:
    return "built_repo" in getattr(item, "fixturenames", ())


def _shared(config) -> Path:
    """The folder of the session's tiny repository: one per session, seen by every pytest-xdist worker (each worker's
    base temp folder is a subfolder of the session's)."""
    base = config._tmp_path_factory.getbasetemp()  # pytest's own per-session folder
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "built-tiny"


def _start_build(config) -> None:
    """Start building the tiny repository in a background process, once per session (whichever worker comes first
    under a file lock), so that it builds while the tests that do not need it run, instead of one test waiting
    for it (about 2 minutes) with a core idle."""
    import fcntl

    shared = _shared(config)
    shared.mkdir(parents=True, exist_ok=True)
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # local disk: flock holds here
        if (shared / "started").exists():
            return
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
               "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
        env.pop("PYTEST_XDIST_WORKER", None)
        # the session's first process (the xdist controller, or this pytest): the build stops when it is gone
        session = os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()
        with open(shared / "build.log", "w") as log:  # the child keeps its own copy of the file
            proc = subprocess.Popen([sys.executable, "-c", "import sys, helpers; helpers.build_tiny(*sys.argv[1:])",
                                     str(shared / "repo"), str(session)], stdout=log, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True)
        (shared / "started").write_text(str(proc.pid))


# trylast: after `-m` has deselected, so that what is left is what this session runs (make test's fast lane used to
# start a build for the slow tests it deselected, and stop it unused when it ended)
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):  # noqa: D103  (the docstring below says it)
    """`make test-fast` (-m "not slow") must not build the tiny repository: a test that uses it and lacks the slow
    marker is a collection error, not a silent 2-minute fixture in the fast lane.

    Order (stable within each group): slow tests that do not need the tiny repository, then the rest, then the
    tests that need it; and when any selected test needs it, its build starts now in the background."""
    unmarked = [item.nodeid for item in items if _uses_built_repo(item) and item.get_closest_marker("slow") is None]
    if unmarked:
        raise pytest.UsageError(f"{unmarked[0]} uses built_repo without @pytest.mark.slow ({len(unmarked)} such tests)")
    items.sort(key=lambda it: (_uses_built_repo(it), it.get_closest_marker("slow") is None))
    if any(_uses_built_repo(it) for it in items) and not config.option.collectonly:
        _start_build(config)


@pytest.fixture(scope="session")
def built_repo(request):
    """A git repository at the tiny scale after a complete `dvc repro`, built once per session in the background
    (about 2 min; pytest_collection_modifyitems starts it) and shared by every test and pytest-xdist worker of the
    session (tests copy it before changing anything)."""
    shared = _shared(request.config)
    if not (shared / "started").exists():  # selected after collection (a plugin's own reordering): build now
        _start_build(request.config)
    deadline = time.monotonic() + BUILD_TIMEOUT
    while not (shared / "built").exists():
        if (shared / "failed").exists() or time.monotonic() > deadline:
            log = (shared / "build.log").read_text(errors="replace")[-3000:]
            pytest.fail(f"the tiny repository did not build ({shared / 'build.log'}):\n{log}")
        time.sleep(1)
    return shared / "repo"
