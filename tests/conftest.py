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
