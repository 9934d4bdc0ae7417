"""`make repro` in one process (src/itervision/pipeline/repro.py): the no-op path makes exactly one `dvc status`
call and runs nothing else but the push; a stale workspace is pulled, reproduced with a progress line per stage
and checked clean after."""
import contextlib

import pytest

from helpers import tiny_params


@pytest.fixture
def driver(tmp_path, monkeypatch):
    from itervision.pipeline import lockfiles, provenance, remote, repro, workspace

    tiny_params(tmp_path)
    monkeypatch.chdir(tmp_path)
    calls = {"status": 0, "pull": 0, "push": 0, "reproduce": 0}
    monkeypatch.setattr(lockfiles, "repair", lambda: [])
    monkeypatch.setattr(provenance, "main", lambda: None)
    monkeypatch.setattr(workspace, "hold", lambda what: contextlib.nullcontext())

    def count(name, value):
        def f(*a, **k):
            calls[name] += 1
            return value() if callable(value) else value
        return f

    monkeypatch.setattr(remote, "pull", count("pull", "pulled 0 files"))
    monkeypatch.setattr(remote, "push", count("push", "nothing pushed"))
    monkeypatch.setattr(remote, "default_remote", lambda repo: ("local", None))  # no remote to remember
    return repro, calls, count, monkeypatch


def test_the_no_op_path_makes_one_status_call_and_runs_nothing(driver, capsys):
    repro, calls, count, monkeypatch = driver
    monkeypatch.setattr(repro, "_status", count("status", {}))
    monkeypatch.setattr(repro, "reproduce", count("reproduce", []))
    repro.main([])
    out = capsys.readouterr().out
    assert calls == {"status": 1, "pull": 0, "push": 1, "reproduce": 0}
    assert "params.yaml: tiny scale, checked" in out and "Data and pipelines are up to date." in out
    assert "0 stages run (0 training runs)" in out and "metrics/claims.md" in out
    repro.main(["--no-push"])
    assert calls["push"] == 1 and calls["status"] == 2


def test_a_stale_workspace_is_pulled_reproduced_and_must_end_clean(driver, capsys):
    repro, calls, count, monkeypatch = driver
    statuses = iter([{"a:run_x": []}, {}])
    monkeypatch.setattr(repro, "_status", lambda: calls.__setitem__("status", calls["status"] + 1) or next(statuses))
    monkeypatch.setattr(repro, "_stages_to_run", lambda repo, stale: ["a:run_x", "a:aggregate"])
    monkeypatch.setattr(repro, "reproduce", count("reproduce", ["a:run_x", "a:aggregate"]))

    class FakeRepo:
        def __init__(self, root):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def status(self):
            return {"a:run_x": []}

    import dvc.repo

    monkeypatch.setattr(dvc.repo, "Repo", FakeRepo)
    repro.main(["--no-push"])
    out = capsys.readouterr().out
    assert calls == {"status": 2, "pull": 1, "push": 0, "reproduce": 1}
    assert "2 stages run (1 training runs)" in out
    statuses = iter([{"a:run_x": []}, {"a:run_x": []}])
    monkeypatch.setattr(repro, "_status", lambda: next(statuses))
    with pytest.raises(SystemExit) as stop:
        repro.main(["--no-push"])
    assert stop.value.code == 2 and "dvc status is not clean after the run" in capsys.readouterr().err


def test_progress_lines_count_the_stages_and_estimate_the_rest(monkeypatch):
    from itervision.pipeline import repro

    clock = iter([0.0, 0.0, 30.0, 90.0])
    monkeypatch.setattr(repro.time, "monotonic", lambda: next(clock))
    p = repro.Progress(["s1", "s2", "s3"])
    assert p.before("s1") == "itervision: stage 1 of 3: s1 (elapsed 0:00)"
    assert p.before("s2") == "itervision: stage 2 of 3: s2 (elapsed 0:30, ETA 1:00)"  # 30 s a stage, 2 left
    assert p.before("s3") == "itervision: stage 3 of 3: s3 (elapsed 1:30, ETA 0:45)"


def test_a_push_at_the_same_dvc_lock_is_not_asked_again(tmp_path, monkeypatch):
    """After a complete push, a no-op `make repro` at the same dvc.lock files and remote skips asking the remote
    (3 s here); a changed dvc.lock, or another remote, pushes again."""
    import subprocess

    from itervision.pipeline import remote, repro

    monkeypatch.chdir(tmp_path)
    subprocess.run(["git", "init", "-q"], check=True)
    subprocess.run(["dvc", "init", "-q"], check=True)
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    pushes = []
    monkeypatch.setattr(remote, "push", lambda: pushes.append(1) or "pushed 3 files")
    store, other = tmp_path / "store", tmp_path / "other"
    store.mkdir()
    other.mkdir()
    monkeypatch.setattr(remote, "default_remote", lambda repo: ("store", str(store)))
    assert repro.push_once(remote) == "pushed 3 files"
    assert "at the last push: nothing pushed" in repro.push_once(remote) and len(pushes) == 1
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages: {a: {cmd: x}}\n")
    assert repro.push_once(remote) == "pushed 3 files" and len(pushes) == 2
    monkeypatch.setattr(remote, "default_remote", lambda repo: ("other", str(other)))
    assert repro.push_once(remote) == "pushed 3 files" and len(pushes) == 3
    other.rmdir()  # the remote folder removed since the last push: its outputs are gone, so push again
    assert repro.push_once(remote) == "pushed 3 files" and len(pushes) == 4


def test_nothing_changed_since_the_last_clean_status_means_no_dvc_at_all(driver, capsys):
    """With the up-to-date stamp intact (pipeline/uptodate.py), the no-op path asks DVC nothing: no status, no
    lock check, and the push decision from the stamp's remote."""
    repro, calls, count, monkeypatch = driver
    from itervision.pipeline import lockfiles, remote, uptodate

    monkeypatch.setattr(uptodate, "still_clean", lambda: {"remote": ["local", None]})
    monkeypatch.setattr(repro, "_status", count("status", {}))
    monkeypatch.setattr(repro, "reproduce", count("reproduce", []))
    monkeypatch.setattr(lockfiles, "repair", count("repair", []))
    monkeypatch.setattr(remote, "default_remote", lambda repo: pytest.fail("DVC's repository opened"))
    calls["repair"] = 0
    repro.main([])
    out = capsys.readouterr().out
    assert calls == {"status": 0, "pull": 0, "push": 1, "reproduce": 0, "repair": 0}
    assert "Data and pipelines are up to date." in out and "0 stages run (0 training runs)" in out


def test_a_planned_stage_that_dvc_skips_is_taken_off_the_count(monkeypatch):
    """Downstream of a changed stage is a maybe: where DVC skips a stage (its inputs came out byte-identical) the
    count shrinks instead of announcing it."""
    from itervision.pipeline import repro

    clock = iter([0.0, 0.0, 10.0])
    monkeypatch.setattr(repro.time, "monotonic", lambda: next(clock))
    p = repro.Progress(["configure", "run_a", "run_b", "aggregate"])
    assert p.before("configure") == "itervision: stage 1 of 4: configure (elapsed 0:00)"
    p.skip("run_a")
    p.skip("run_b")
    assert p.before("aggregate") == "itervision: stage 2 of 2: aggregate (elapsed 0:10, ETA 0:10)"
