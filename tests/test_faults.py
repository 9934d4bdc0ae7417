"""Faults at the DVC level, on a copy of the session's tiny repository with complete results (reliability round 3):
stale inputs (a changed source file, a comment in one model family), a truncated dvc.lock, the regression gate's
honest exit codes, what `make repro` says about the remote, and params rules checked before any run trains."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from helpers import BIN, sh

pytestmark = pytest.mark.slow
PY = sys.executable


@pytest.fixture
def repo(built_repo, tmp_path):
    dst = tmp_path / "repo"
    shutil.copytree(built_repo, dst, symlinks=True)
    return dst


def changed_stages(repo) -> list[str]:
    return sorted(json.loads(sh("dvc status --json", repo).strip().splitlines()[-1] or "{}"))


def run(repo, *args, env=None):
    return subprocess.run([PY, *args], cwd=repo, capture_output=True, text=True, timeout=600, env=env)


def one_line(r, status: int, expected: str):
    assert r.returncode == status, (r.returncode, r.stdout[-1000:], r.stderr[-1000:])
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and expected in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_a_changed_source_file_reruns_the_subset_and_then_the_runs(repo):
    """Silent stale result of the past: rewriting the labels of the source files left `dvc status` clean."""
    import gzip

    labels = repo / "synthetic/fashion_mnist/train-labels-idx1-ubyte.gz"
    raw = bytearray(gzip.decompress(labels.read_bytes()))
    raw[8:] = bytes((b + 1) % 10 for b in raw[8:])  # every label + 1
    labels.write_bytes(gzip.compress(bytes(raw)))
    assert changed_stages(repo) == ["make_subset@fashion_mnist"]
    sh("dvc repro make_subset@fashion_mnist", repo)
    stale = changed_stages(repo)
    assert any(":run_recursive@" in s for s in stale) and any(":run_sparseformer@" in s for s in stale)
    assert not any(":profile_" in s for s in stale)  # profiles read no data


def test_a_comment_in_one_model_family_reruns_that_familys_stages_only(repo):
    """Silent waste of the past: a comment in models/recursive.py reran 30 stages, 13 of them SparseFormer."""
    f = repo / "src/itervision/models/recursive.py"
    f.write_text(f.read_text() + "\n# a comment\n")
    stale = changed_stages(repo)
    # and the interleaved timing of the recursive study's models (stage timing_recursive): it trains them too
    assert stale and all(s.startswith(("pipelines/recursive/", "pipelines/recursive-ablations/"))
                         or s == "timing_recursive" for s in stale), stale
    assert {re.sub(r"@.*", "", s.split(":")[-1]) for s in stale} == {"run_recursive", "profile_recursive",
                                                                      "run_recursive_ablation",
                                                                      "profile_recursive_ablation", "timing_recursive"}


def test_a_truncated_lock_file_is_restored_from_git_or_named(repo):
    """DVC writes dvc.lock in place: killed at that moment it is left empty or cut short, and every dvc command
    then fails naming no fix. The project's check restores a committed one and names an untracked one."""
    from itervision.pipeline.lockfiles import problem

    lock = repo / "pipelines/recursive/dvc.lock"
    good = lock.read_text()
    assert problem(good) is None
    for cut in (0, 1, 120, len(good) // 3, len(good) // 2, len(good) - 5):  # wherever the kill lands
        assert problem(good[:cut]) is not None, cut
    lock.write_text(good[:120])
    dvc = subprocess.run([str(BIN / "dvc"), "status"], cwd=repo, capture_output=True, text=True)
    assert dvc.returncode != 0 or "changed" in dvc.stdout  # DVC fails, or forgets what the lock recorded
    r = run(repo, "-m", "itervision.pipeline.lockfiles")
    assert r.returncode == 0 and "restored from git HEAD" in r.stderr, r.stderr
    assert lock.read_text() == good and changed_stages(repo) == []
    sh("git rm -q --cached pipelines/recursive/dvc.lock && git -c user.email=t@t -c user.name=t commit -qm untrack",
       repo)
    lock.write_text("")
    one_line(run(repo, "-m", "itervision.pipeline.lockfiles"), 2, "pipelines/recursive/dvc.lock is empty")


def test_the_gate_compares_honestly_or_exits_2(repo, tmp_path):
    gate = ["stages/check_regressions.py"]
    clean_path = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}  # no venv on PATH: dvc via python
    ok = run(repo, *gate, "HEAD", env=clean_path)
    assert ok.returncode == 0 and re.search(r"[1-9]\d* accuracy metrics compared", ok.stdout), ok.stderr
    # a revision from before the metrics existed: nothing to compare
    one_line(run(repo, *gate, "HEAD~1"), 2, "has no metrics/recursive.json")
    # a workspace whose metrics are stale
    params = repo / "params.yaml"
    params.write_text(params.read_text().replace("lr: 0.004", "lr: 0.003"))
    one_line(run(repo, *gate, "HEAD"), 2, "the workspace metrics are stale")
    sh("git checkout -q params.yaml", repo)
    # a corrupt workspace metrics file (DVC sees it changed; either way the gate cannot compare)
    (repo / "metrics/recursive.json").write_text("{")
    one_line(run(repo, *gate, "HEAD"), 2, "")
    # saved diffs: empty, a `dvc metrics show` output, a NaN baseline, an absurd interval
    cases = {"{}": "holds none of the gated metrics files",
             json.dumps({"workspace": {"data": {"metrics/recursive.json": {"data": {}}}}}): "none of the gated",
             '{"metrics/recursive.json": {"a.top1.mean": {"old": NaN, "new": 0.8}}}': "is nan, not a finite number",
             json.dumps({"metrics/recursive.json": {"a.top1.mean": {"old": 0.8, "new": 0.3},
                                                    "a.top1.ci95": {"old": -5, "new": 0.01}}}): "= -5.0 is not a half",
             json.dumps({"metrics/recursive.json": {"a.top1.mean": {"old": 0.8, "new": 0.3},
                                                    "a.top1.ci95": {"old": 0.9, "new": 0.9}}}): "nothing to compare"}
    for text, expected in cases.items():
        (tmp_path / "d.json").write_text(text)
        one_line(run(repo, *gate, "--diff-json", str(tmp_path / "d.json")), 2, expected)


def test_make_repro_says_what_the_remote_really_gave(repo, tmp_path):
    """Silent wrong message of the past: "pulled what the DVC remote holds" with no remote folder at all."""
    store = tmp_path / "store"
    sh(f"dvc remote add -f -d local {store}", repo)
    r = run(repo, "-m", "itervision.pipeline.remote", "pull")
    assert f"no DVC remote folder at {store}" in r.stdout and "nothing pulled" in r.stdout
    r = run(repo, "-m", "itervision.pipeline.remote", "push")
    assert re.search(r"pushed \d+ files to DVC remote 'local'", r.stdout), r.stdout + r.stderr
    clone = tmp_path / "clone"
    sh(f"git clone -q {repo} {clone} && cd {clone} && dvc remote add -f -d local {store}", tmp_path)
    r = run(clone, "-m", "itervision.pipeline.remote", "pull")
    assert re.search(r"pulled [1-9]\d* files from DVC remote 'local'", r.stdout), r.stdout + r.stderr


def test_every_params_rule_holds_before_any_run_trains(repo):
    """`seeds` is no param of configure's own, yet configure depends on the whole params file, so a repeated seed
    fails there, before DVC starts any run stage."""
    r = subprocess.run([str(BIN / "dvc"), "exp", "run", "-S", "seeds=[0,1,1]"], cwd=repo, capture_output=True,
                       text=True, timeout=600, env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"})
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "'seeds' repeats seed 1" in out
    assert "Running stage 'configure'" in out and ":run_" not in out
