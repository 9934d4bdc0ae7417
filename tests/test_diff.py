"""`make diff`: the ledger's changed verdicts, estimates and Holm p against a revision, one line each."""
import json
import subprocess
import sys

from helpers import ROOT
from itervision.pipeline.diff import changes


def ledger(*rows):
    return {"documents": {"recursive": {"entries": [dict(zip(("test_id", "verdict", "estimate", "p_holm",
                                                               "p_size_holm"), r)) for r in rows]}}}


def test_one_changed_verdict_is_exactly_one_line():
    before = ledger(("a", "inconclusive at the proxy", "0.1 ± 0.2 (n 5)", "0.4", ""),
                    ("b", "holds at the proxy", "1.0 ± 0.2 (n 5)", "0.01", "0.5"))
    after = ledger(("a", "inconclusive at the proxy", "0.1 ± 0.2 (n 5)", "0.4", ""),
                   ("b", "reversed at the proxy", "1.0 ± 0.2 (n 5)", "0.01", "0.5"))
    assert changes(before, after) == ["~ recursive | b: verdict holds at the proxy -> reversed at the proxy"]
    assert changes(before, before) == []
    gone = ledger(("a", "inconclusive at the proxy", "0.1 ± 0.2 (n 5)", "0.4", ""))
    assert changes(before, gone) == ["- recursive | b: was holds at the proxy"]
    assert changes(gone, before) == ["+ recursive | b: holds at the proxy (1.0 ± 0.2 (n 5))"]


def test_make_diff_against_a_revision_in_a_repository(tmp_path):
    """The command against a real git revision: the committed ledger, one verdict changed in the workspace."""
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "metrics").mkdir()
    path = tmp_path / "metrics/ledger.json"
    rows = [("a", "inconclusive at the proxy", "x", "0.4", ""), ("b", "holds at the proxy", "y", "0.01", "")]
    path.write_text(json.dumps(ledger(*rows)))
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "ledger")
    run = [sys.executable, "-m", "itervision.pipeline.diff"]
    same = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True)
    assert same.returncode == 0 and same.stdout == ""  # nothing changed: nothing printed
    rows[0] = ("a", "smaller than published at the proxy", "x", "0.04", "")
    path.write_text(json.dumps(ledger(*rows)))
    moved = subprocess.run(run + ["HEAD"], cwd=tmp_path, capture_output=True, text=True)
    assert moved.stdout.splitlines() == [
        "~ recursive | a: verdict inconclusive at the proxy -> smaller than published at the proxy; Holm p 0.4 -> 0.04"]
    bad = subprocess.run(run + ["no-such-rev"], cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode == 2 and "neither a git revision nor one DVC experiment" in bad.stderr
    assert (ROOT / "Makefile").read_text().count("itervision.pipeline.diff") == 1
