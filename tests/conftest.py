import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "2")


def _build(path):
    from helpers import make_repo, sh

    make_repo(path)
    out = sh("dvc repro", path)
    assert "Running stage 'report_sparseformer'" in out
    sh("git add -A && git -c user.email=t@t -c user.name=t commit -qm results", path)
    return path


@pytest.fixture(scope="session")
def built_repo(tmp_path_factory):
    """A git repository at the tiny scale after a complete `dvc repro`, built once per session (about 3 min).

    Under pytest-xdist (`make test` runs two workers) the workers of one session share it: the first to need it
    builds it in the session's base folder under a file lock, the other waits for it and reads the same repository
    (tests copy it before changing anything)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return _build(tmp_path_factory.mktemp("tiny") / "repo")
    import fcntl

    shared = tmp_path_factory.getbasetemp().parent / "built-tiny"  # one folder per session, seen by every worker
    shared.mkdir(exist_ok=True)
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # local disk: flock holds here
        done = shared / "built"
        if not done.exists():
            _build(shared / "repo")
            done.write_text(worker)
    return shared / "repo"


def pytest_collection_modifyitems(config, items):  # noqa: D103  (the docstring below says it)
    """`make test-fast` (-m "not slow") must not build the tiny repository: a test that uses it and lacks the slow
    marker is a collection error, not a silent 3-minute fixture in the fast lane."""
    unmarked = [item.nodeid for item in items
                if "built_repo" in getattr(item, "fixturenames", ()) and item.get_closest_marker("slow") is None]
    if unmarked:
        raise pytest.UsageError(f"{unmarked[0]} uses built_repo without @pytest.mark.slow ({len(unmarked)} such tests)")
