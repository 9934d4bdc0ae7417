import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "2")


@pytest.fixture(scope="session")
def built_repo(tmp_path_factory):
    """A git repository at the tiny scale after a complete `dvc repro`, built once per session (about 3 min)."""
    from helpers import make_repo, sh

    path = make_repo(tmp_path_factory.mktemp("tiny") / "repo")
    out = sh("dvc repro", path)
    assert "Running stage 'report_sparseformer'" in out
    sh("git add -A && git -c user.email=t@t -c user.name=t commit -qm results", path)
    return path


def pytest_collection_modifyitems(config, items):
    """`make test-fast` (-m "not slow") must not build the tiny repository: a test that uses it and lacks the slow
    marker is a collection error, not a silent 3-minute fixture in the fast lane."""
    unmarked = [item.nodeid for item in items
                if "built_repo" in getattr(item, "fixturenames", ()) and item.get_closest_marker("slow") is None]
    if unmarked:
        raise pytest.UsageError(f"{unmarked[0]} uses built_repo without @pytest.mark.slow ({len(unmarked)} such tests)")
