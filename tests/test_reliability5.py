"""Reliability round 5: commands take only what they can honour, and refuse before anything is written; exports
that are safe to open (no formula runs in a spreadsheet, every Markdown row keeps its cells, no HTML passes)."""
from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import yaml

from helpers import ROOT, tiny_params

PY = sys.executable
HOSTILE = ['=HYPERLINK("http://evil.example","x")', "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\tTAB",
           "a | b | c", "<img src=x onerror=alert(1)>", "![x](http://evil.example/p.png)", "&#60;script&#62;",
           "two\nlines"]


def one_line(r: subprocess.CompletedProcess, rc: int, *needles: str) -> str:
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert r.returncode == rc, (r.returncode, r.stdout[-1500:], r.stderr[-1500:])
    assert lines and lines[-1].startswith("error:") and "Traceback" not in r.stderr, r.stderr[-1500:]
    for n in needles:
        assert n in lines[-1], (n, lines[-1])
    return lines[-1]


# ---------------------------------------------------------------------------------------------- 1. settle's max n

def test_a_design_past_the_seed_limit_is_none_not_the_limit():
    from itervision.stats.sequential import max_seeds, sequence_power

    assert max_seeds(5, 0.01, 1.0) is None  # ~78,500 new seeds: beyond 10,000
    assert max_seeds(5, 0.05, 1.0) == 5 + 3142  # within the limit: the pilot and the design's new seeds
    assert max_seeds(5, 0.05, 1.0, limit=3141) is None  # one seed short: None, never the limit itself
    n = max_seeds(5, 0.5, 1.0)
    assert n is not None and n < 10_000 and sequence_power([5, n], n, 5, 0.5, 1.0) >= 0.79  # normal approximation


# ---------------------------------------------------------------------------------------------- 2., 5., 7. plan

@pytest.mark.parametrize("args,needles", [
    (["--gpu", "nvidia-h200", "--hours", "nan"], ["--hours nan (HOURS) is not a positive number"]),
    (["--gpu", "nvidia-h200", "--hours", "-1"], ["--hours -1.0 (HOURS)"]),
    (["--gpu", "nvidia-h200", "--hours", "5", "--gpus", "0"], ["--gpus 0 (GPUS)"]),
    (["--gpu", "nvidia-h200", "--gpus", "-8"], ["--gpus -8 (GPUS)"]),
    (["--hours", "5"], ["add --gpu NAME"]),
    (["--scale", "paper", "--gpu", "nvidia-h200", "--write-placement"], ["set_scale.py paper"]),
    (["--gpu", "nvidia-h200", "--write-placement"], ["holds the cpu scale", "make paper-scale"]),
])
def test_the_plan_refuses_bad_arguments_before_planning(tmp_path, args, needles):
    params = tmp_path / "params.yaml"
    params.write_text((ROOT / "params.yaml").read_text())
    before = params.read_bytes()
    r = subprocess.run([PY, str(ROOT / "stages/check_paper_plan.py"), "--params", str(params), *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    one_line(r, 2, *needles)
    assert r.stdout.strip() == ""  # not one line of a plan before the refusal
    assert params.read_bytes() == before


def test_the_campaign_refuses_gpus_this_machine_does_not_have(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    r = subprocess.run([PY, "-m", "itervision.pipeline.campaign", "--gpus", "2"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    one_line(r, 2, "--gpus 2 asks for more GPUs than torch sees here (0: no CUDA device)")
    r = subprocess.run([PY, "-m", "itervision.pipeline.campaign", "--gpus", "-1"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    one_line(r, 2, "--gpus -1 is below 0")
    assert "gpus-per-worker" not in r.stderr


# ---------------------------------------------------------------------------------------------- 8. quoting

def test_make_variables_never_reach_the_shell(tmp_path):
    """CLAIM / EXP / HOURS with ; $( ) and quotes stay one argument of the command: nothing runs."""
    canary = tmp_path / "pwned"
    for var in ("CLAIM", "EXP", "HOURS", "SCHEDULER"):
        value = f"x;touch {canary};echo $(touch {canary}) `touch {canary}` '\"y"
        target = {"CLAIM": "settle", "EXP": "settle", "HOURS": "paper-plan", "SCHEDULER": "campaign"}[var]
        subprocess.run(["make", "-n", "--no-print-directory", target, f"{var}={value}"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)  # -n prints the recipe: the value must appear only as "$NAME"
        dry = subprocess.run(["make", "-n", "--no-print-directory", target, f"{var}={value}"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60).stdout
        assert f'"${var}"' in dry and "touch" not in dry, dry
    assert not canary.exists()


# ---------------------------------------------------------------------------------------------- 4. exports

def test_cells_are_neutralised():
    from itervision.reporting.escape import csv_cell, md_cell

    assert csv_cell('=HYPERLINK("a")') == '\'=HYPERLINK("a")' and csv_cell("+cmd") == "'+cmd"
    assert csv_cell("-0.31") == "-0.31" and csv_cell("@x") == "'@x" and csv_cell(3) == 3 and csv_cell("ok") == "ok"
    assert md_cell("a | b") == "a \\| b" and md_cell("n < 5") == "n < 5" and md_cell("[0.2, 0.7]") == "[0.2, 0.7]"
    assert "<img" not in md_cell("<img src=x>") and "](" not in md_cell("![x](http://e)")
    assert md_cell("&#60;b") == "&amp;#60;b" and "\n" not in md_cell("a\nb")


def md_rows(text: str) -> list[list[str]]:
    """The cells of every table row of a Markdown file, split as GFM does (an escaped pipe does not split)."""
    out = []
    for line in text.splitlines():
        if line.startswith("|") and not set(line) <= set("|-"):
            cells = [c for c in __import__("re").split(r"(?<!\\)\|", line.strip())[1:-1]]
            out.append(cells)
    return out


def test_hostile_texts_reach_no_export_as_formula_or_markup(tmp_path, monkeypatch):
    """Hostile texts in every field of a ledger row, and in a reference source, go through the real writer: the
    CSV has no cell a spreadsheet would evaluate, every Markdown row has the header's number of cells, and no
    raw HTML or link syntax is left."""
    from itervision.claims import render as ledger
    from itervision.reporting.tables import write_table
    from itervision.reporting.figures import write_csv

    row = {c: HOSTILE[i % len(HOSTILE)] for i, c in enumerate(ledger.COLUMNS)}
    row.update(document="000", fidelity="proxy")
    entries = [SimpleNamespace(document="000", fidelity="proxy", refs=[("d", "r", "q")], claims=[1])]
    monkeypatch.setattr(ledger, "rows", lambda es: [dict(row)])
    monkeypatch.setattr(ledger, "sources", lambda doc: {("d", "r", "q"): HOSTILE[1]})
    monkeypatch.setattr(ledger, "headline", lambda es: {"000": {"proxy": {"tests": 1, "claims": 1,
                                                                          "verdicts": {HOSTILE[5]: 1}}}})
    ledger.write(entries, {}, tmp_path / "c.md", tmp_path / "c.csv", tmp_path / "c.json", tmp_path / "l.json")
    write_table(tmp_path / "t", "T", ["a", "b"], [[HOSTILE[0], HOSTILE[5]], [HOSTILE[6], HOSTILE[7]]])
    write_csv(tmp_path / "f.csv", ["model", "x"], [[h, 1.5] for h in HOSTILE])
    for path in ("c.csv", "t.csv", "f.csv"):
        for cells in csv.reader(io.StringIO((tmp_path / path).read_text())):
            for cell in cells:
                assert not cell.startswith(("=", "+", "@", "\t", "\r")), (path, cell)
                assert not cell.startswith("-") or cell.lstrip("-").replace(".", "", 1).isdigit(), (path, cell)
    for path in ("c.md", "t.md"):
        text = (tmp_path / path).read_text()
        rows = md_rows(text)
        assert rows and len({len(r) for r in rows}) == 1, (path, [len(r) for r in rows])
        assert "<img" not in text and "](http" not in text and "&#60;" not in text, path


# ---------------------------------------------------------------------------------------------- 5. CPU-scale placement

def test_placement_is_not_written_into_a_cpu_scale_params(tmp_path):
    tiny_params(tmp_path)
    before = (tmp_path / "params.yaml").read_bytes()
    r = subprocess.run([PY, str(ROOT / "stages/check_paper_plan.py"), "--params", str(tmp_path / "params.yaml"),
                        "--gpu", "nvidia-h200", "--write-placement", "--fast"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    one_line(r, 2, "holds the tiny scale")
    assert (tmp_path / "params.yaml").read_bytes() == before
    assert yaml.safe_load(before)["run"]["placement"] == {}
    assert os.path.exists(tmp_path / "params.yaml")


# ---------------------------------------------------------------------------------------------- 10. settle after Ctrl-C

def test_an_interrupted_settle_resumes_with_the_same_command(tmp_path, monkeypatch):
    """Ctrl-C while the look trains: one line says to run the same command again; that rerun finds its look
    already in params.yaml and trains the rest (no "not up to date" refusal, no second write of params)."""
    import contextlib

    from itervision.config.params import load_params
    from itervision.errors import UserError
    from itervision.pipeline import settle as st
    from itervision.pipeline import workspace
    from itervision.stats.sequential import design

    tiny_params(tmp_path)
    params = tmp_path / "params.yaml"
    pilot = [12.0, 30.0]
    target = st.Target("recursive", "fashion_mnist: dsa-moe - sa-mlp", "fashion_mnist", ["dsa-moe", "sa-mlp"],
                       pilot, 20.0, "points", "inconclusive (n = 2)", None, family=3)
    d = {"study": "recursive", "dataset": "fashion_mnist", "models": target.models,
         **design(pilot, 20.0, alpha=target.alpha)}
    plan = st.Plan(target, 2, d["max_n"], d["max_n_point"], d["sd_pilot"], d["sd_planning"], 3,
                   [("dsa-moe", 2), ("sa-mlp", 2)], 10.0, design=d)
    calls = []

    def dvc(command, env=None):
        calls.append(command)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return 0

    monkeypatch.setattr(workspace, "hold", lambda what: contextlib.nullcontext())
    monkeypatch.setattr(st.subprocess, "call", dvc)
    monkeypatch.setattr(st, "stale_stages", lambda: [])
    ledger = {"documents": {"recursive": {"entries": [{"test_id": target.test_id, "verdict": "v", "reason": "r"}]}}}
    monkeypatch.setattr(st, "load", lambda path: (None, ledger, None))
    with pytest.raises(UserError, match="run the same make settle command again"):
        st.settle(params, [plan], dry_run=False)
    written = params.read_bytes()
    assert load_params(params).settle_claims[target.test_id]["looks"] == [2, 3]
    # after the interruption the statistics are stale: a fresh start would be refused, the resumed look is not
    monkeypatch.setattr(st, "stale_stages", lambda: ["pipelines/recursive/dvc.yaml:aggregate_recursive"])
    st.settle(params, [plan], dry_run=False)
    assert calls == [["dvc", "repro"], ["dvc", "repro"]] and params.read_bytes() == written


# ------------------------------------------------------------------------------------------ 11. orphans of a wrapper

def test_a_pipeline_process_left_by_a_killed_wrapper_is_found_and_named(tmp_path, monkeypatch):
    """The wrapper holding the workspace lock was killed alone and its `dvc repro` still runs: the next command
    is refused in one line naming that process, and goes ahead once it has ended."""
    from itervision.errors import UserError
    from itervision.pipeline.workspace import hold

    fake = tmp_path / "dvc"
    fake.write_text("#!/bin/sh\nsleep 60\n")
    fake.chmod(0o755)
    orphan = subprocess.Popen([str(fake), "repro"], cwd=tmp_path, start_new_session=True)
    monkeypatch.chdir(tmp_path)
    try:
        with pytest.raises(UserError, match=rf"\(PID {orphan.pid}\) still runs in this workspace.*kill {orphan.pid}"):
            with hold("make repro", tmp_path / "lock"):
                pass
        assert not (tmp_path / "lock").exists()  # refused: no lock left behind
    finally:
        # the shell and the child it forks for `sleep` (which carries the shell's command line until it execs)
        import signal
        import time

        os.killpg(orphan.pid, signal.SIGKILL)
        orphan.wait()
        from itervision.pipeline.workspace import pipeline_processes

        deadline = time.monotonic() + 10
        while pipeline_processes(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.1)
    with hold("make repro", tmp_path / "lock"):
        assert (tmp_path / "lock").exists()


def test_a_settle_of_a_test_without_a_published_size_says_why():
    from itervision.errors import UserError
    from itervision.pipeline.settle import find

    ledger = {"documents": {"recursive": {"entries": [
        {"test_id": "fashion_mnist: dsa-moe - sa-moe", "kind": "statistical", "verdict": "inconclusive at the proxy",
         "plot": {"published": [], "per_seed": [0.1, 0.2], "null": 0.0}}]}}}
    with pytest.raises(UserError, match="no published size: settle plans its seeds for power at the published"):
        find([], "dsa-moe - sa-moe", ledger)
    with pytest.raises(UserError, match="matches no test settle can add seeds to"):
        find([], "no such test", ledger)
