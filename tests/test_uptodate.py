"""The no-op `make repro` without DVC (src/itervision/pipeline/uptodate.py): after a clean `dvc status` the stamp of
what DVC looked at says "up to date" on its own, and any change DVC would see (a dependency touched, an output
removed or added to, a lock or params byte, a copy of the workspace) sends the next `make repro` back to DVC."""
import os
import shutil

import pytest

from helpers import sh


@pytest.fixture
def small_repo(tmp_path, monkeypatch):
    """A DVC repository of one stage (a dependency, a params key, an output folder), reproduced."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "src.txt").write_text("a\n")
    (root / "params.yaml").write_text("k: 1\n")
    sh("git init -q && dvc init -q", root)
    sh("dvc stage add -q -n copy -d src.txt -p k -o out 'mkdir -p out && cp src.txt out/a.txt' && dvc repro -q", root)
    monkeypatch.chdir(root)
    return root


def _dvc_status_is_clean(root):
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return not repo.status()


def test_a_clean_status_leaves_a_stamp_that_every_change_dvc_sees_breaks(small_repo):
    from itervision.pipeline import repro, uptodate

    assert uptodate.still_clean() is None  # no stamp yet: DVC is asked
    assert repro._status() == {}
    stamp = uptodate.still_clean()
    assert stamp is not None and _dvc_status_is_clean(small_repo)
    assert str(small_repo / "src.txt") in stamp["paths"] and str(small_repo / "out") in stamp["paths"]

    def broken_by(change, undo):
        change()
        seen = uptodate.still_clean()
        undo()
        return seen is None

    src, out_file = small_repo / "src.txt", small_repo / "out" / "a.txt"
    st = src.stat()
    assert broken_by(lambda: os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9)),
                     lambda: os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns)))
    src.write_text("b\n")
    assert not _dvc_status_is_clean(small_repo)  # DVC sees an edit ...
    assert uptodate.still_clean() is None  # ... and so does the stamp
    src.write_text("a\n")
    assert repro._status() == {} and uptodate.still_clean() is not None  # clean again: a new stamp
    assert broken_by(lambda: (small_repo / "out" / "extra.txt").write_text("x"),
                     lambda: (small_repo / "out" / "extra.txt").unlink())
    saved = out_file.read_bytes()
    assert broken_by(out_file.unlink, lambda: out_file.write_bytes(saved))
    assert uptodate.still_clean() is None  # the restored file is another inode and mtime: DVC is asked once more
    assert repro._status() == {} and uptodate.still_clean() is not None
    lock = (small_repo / "dvc.lock").read_text()
    assert broken_by(lambda: (small_repo / "dvc.lock").write_text(lock + "\n"),
                     lambda: (small_repo / "dvc.lock").write_text(lock))
    assert broken_by(lambda: (small_repo / "params.yaml").write_text("k: 2\n"),
                     lambda: (small_repo / "params.yaml").write_text("k: 1\n"))
    # a stale status forgets the stamp
    (small_repo / "params.yaml").write_text("k: 2\n")
    assert repro._status() != {} and not (small_repo / uptodate.STAMP).exists()


def test_a_copy_of_the_workspace_does_not_trust_the_originals_stamp(small_repo, tmp_path, monkeypatch):
    from itervision.pipeline import repro, uptodate

    assert repro._status() == {} and uptodate.still_clean() is not None
    copy = tmp_path / "copy"
    shutil.copytree(small_repo, copy, symlinks=True)
    monkeypatch.chdir(copy)
    (copy / "src.txt").write_text("changed in the copy\n")
    assert uptodate.still_clean() is None  # the original's files are unchanged, but this is another workspace
