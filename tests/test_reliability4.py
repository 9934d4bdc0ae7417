"""Reliability round 4: results that do not depend on the CPU, inputs checked at the stage that reads them, one
pipeline writer per workspace. Each case ends in one line naming the cause and the fix, no traceback, and nothing
partial where a later step would trust it."""
import csv
import hashlib
import json
import os
import subprocess
import sys

import pytest
import yaml

from helpers import ROOT, prepare
from test_bad_inputs import assert_one_line, run

PY = sys.executable
RUN = ["stages/run.py", "--study", "recursive", "--dataset", "fashion_mnist", "--model", "sa-mlp", "--seed", "0",
       "--quiet"]


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_env(cwd, env, *args):
    return subprocess.run([PY, *[str(ROOT / a) if a.startswith("stages/") else a for a in args]], cwd=cwd,
                          capture_output=True, text=True, timeout=600, env={**os.environ, **env})


# ---------------------------------------------------------------------------------------------- 1. CPU capability

@pytest.mark.slow
def test_the_recipes_cpu_pin_wins_over_the_callers_environment(tmp_path):
    """ATEN_CPU_CAPABILITY=default (and oneDNN/MKL asked for older code paths) changed the weights of a run; with
    train.cpu_capability pinned, the caller's environment changes nothing, and the run records what it ran on."""
    prepare(tmp_path, cpu_capability="avx2")
    weights = tmp_path / "runs/recursive/fashion_mnist/sa-mlp/seed0/weights.pt"
    hashes = []
    for env in ({}, {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_CBWR": "COMPATIBLE"}):
        r = run_env(tmp_path, env, *RUN)
        assert r.returncode == 0, r.stderr[-2000:]
        hashes.append(sha(weights))
        env_record = json.loads((weights.parent / "config.json").read_text())["environment"]
        assert env_record["cpu"]["capability"] == "AVX2" and env_record["packages"]["torch"]
        subprocess.run(["rm", "-rf", str(tmp_path / "runs")], check=True)
    assert hashes[0] == hashes[1]


def test_a_cpu_without_the_pinned_capability_is_refused(monkeypatch):
    import torch

    from itervision.engine.environment import check_cpu_pin
    from itervision.errors import UserError

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    check_cpu_pin("avx2")
    check_cpu_pin("native")
    with pytest.raises(UserError, match="not the AVX512 that train.cpu_capability pins"):
        check_cpu_pin("avx512")


# ---------------------------------------------------------------------------------------------- 2., 7., 12., 13.

def check_params(tmp_path, edit) -> subprocess.CompletedProcess:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    edit(params)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return run(tmp_path, "-m", "itervision.config.params", str(tmp_path / "params.yaml"))


@pytest.mark.parametrize("name,entry,expected", [
    ("dsa-mo", {"topk": 2}, "models.dsa-mo names no architecture (arch: None); a typo of 'dsa-moe'?"),
    ("nope", {"topk": 3}, "models.nope names no architecture (arch: None); give it `arch:`"),
    ("dsa-moe-x", {"arch": "recursive", "topkk": 3}, "unknown key 'models.dsa-moe-x (on fashion_mnist).topkk'"),
])
def test_a_typo_in_dash_s_names_the_nearest_model(tmp_path, name, entry, expected):
    """`dvc exp run -S '+models.dsa-mo.topk=2'` used to pass and record an experiment that changed nothing."""
    assert_one_line(check_params(tmp_path, lambda p: p["models"].update({name: entry})), expected)


@pytest.mark.parametrize("key,value,expected", [
    ("epochs", 100_000_000, "train.epochs 100000000 (recursive on fashion_mnist) exceeds 1,000"),
    ("global_batch", 10 ** 6, "train.global_batch 1000000 (recursive on fashion_mnist) exceeds 65,536"),
])
def test_budgets_beyond_any_study_are_refused(tmp_path, key, value, expected):
    assert_one_line(check_params(tmp_path, lambda p: p["train"].update({key: value})), expected)


def test_more_threads_than_cores_is_warned_with_its_cost(tmp_path):
    r = check_params(tmp_path, lambda p: p["train"].update({"threads": 512}))
    assert r.returncode == 0 and "train.threads 512" in r.stderr and "cores" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 2  # one line per study, not one per model


def test_a_data_root_that_resolves_to_a_system_folder_is_named(tmp_path):
    link = tmp_path / "data-link"
    link.symlink_to("/")
    r = check_params(tmp_path, lambda p: p["data"]["sources"].update({"fashion_mnist": str(link)}))
    assert_one_line(r, f"data.sources.fashion_mnist is {link}, which resolves to / (a symlink?)")


def test_an_alias_bomb_and_a_huge_params_file_are_refused_at_once(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi")))
    assert_one_line(run(tmp_path, "-m", "itervision.config.params", str(bomb)), "uses a YAML alias at line 2")
    big = tmp_path / "big.yaml"
    big.write_text("scale: cpu\n# " + "x" * 2_000_000 + "\n")
    assert_one_line(run(tmp_path, "-m", "itervision.config.params", str(big)), "is 2.0 MB; a params file is a few KB")


def test_an_idx_file_with_extra_bytes_is_not_called_truncated(tmp_path):
    from itervision.data.sources import read_idx
    from itervision.errors import UserError

    path = tmp_path / "labels-idx1-ubyte"
    path.write_bytes(bytes([0, 0, 8, 1]) + (3).to_bytes(4, "big") + bytes([1, 2, 3]) + b"JUNK")
    with pytest.raises(UserError, match="holds 4 bytes after the 3 its header promises"):
        read_idx(path)
    path.write_bytes(bytes([0, 0, 8, 1]) + (3).to_bytes(4, "big") + bytes([1, 2]))
    with pytest.raises(UserError, match="it is truncated"):
        read_idx(path)


def test_a_full_disk_during_the_report_names_the_file(tmp_path):
    from itervision.errors import describe_os_error
    from itervision.reporting.tables import naming

    target = tmp_path / "table.md"
    with pytest.raises(OSError) as err, naming(target):
        raise OSError(28, "No space left on device")  # what a write into a full disk raises: no file name
    assert str(target) in describe_os_error(err.value) and "No space left" in describe_os_error(err.value)


# ---------------------------------------------------------------------------------------------- 3. reference CSVs

GOOD = "dataset,row,quantity,value,source\ncifar10,dsa-moe,top1,92.3,summary\n"


@pytest.mark.parametrize("text,expected", [
    (GOOD + "cifar10,dsa-moe,top1,12.5,copy\n", "ref.csv:3: cifar10/dsa-moe/top1 is already given on line 2"),
    (GOOD.replace("92.3", "nan"), "ref.csv:2: value nan is not a finite number"),
    (GOOD.replace("92.3", "inf"), "ref.csv:2: value inf is not a finite number"),
    (GOOD.replace("92.3", "high"), "ref.csv:2: value 'high' is not a number"),
    ("dataset,row,quantity,source\ncifar10,dsa-moe,top1,summary\n", "lacks the column(s) value"),
    ("dataset,row,quantity,value,source\n", "holds no published numbers"),
])
def test_reference_csvs_are_read_through_one_checked_reader(tmp_path, text, expected):
    from itervision.errors import UserError
    from itervision.reporting.tables import load_reference

    (tmp_path / "ref.csv").write_text(text)
    with pytest.raises(UserError) as err:
        load_reference(tmp_path / "ref.csv")
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_a_row_the_ledger_reads_and_the_csv_lacks_is_named(tmp_path):
    from itervision.errors import UserError
    from itervision.reporting.tables import load_reference

    (tmp_path / "ref.csv").write_text(GOOD)
    ref = load_reference(tmp_path / "ref.csv")
    assert ref[("cifar10", "dsa-moe", "top1")] == 92.3 and ("x", "y", "z") not in ref
    with pytest.raises(UserError, match="has no row cifar100/dsa-moe/top1, which the claims ledger"):
        ref[("cifar100", "dsa-moe", "top1")]


# ---------------------------------------------------------------------------------------------- 4., 5. run records

def test_per_seed_accuracies_are_range_checked_where_read(tmp_path, monkeypatch):
    from itervision.errors import UserError
    from itervision.runs import RunRecord

    monkeypatch.chdir(tmp_path)
    record = RunRecord("recursive", "fashion_mnist", "sa-mlp", 0)
    record.dir.mkdir(parents=True)
    for bad in (1.7, float("nan"), -0.1, "0.9"):
        record.path("metrics.json").write_text(json.dumps({"splits": {
            "calib": {"top1_per_exit": [0.5]}, "test": {"top1_per_exit": [0.5, bad]}}}))
        with pytest.raises(UserError, match=r"runs/recursive/fashion_mnist/sa-mlp/seed0: test top-1 .* is not an "
                                            r"accuracy in \[0, 1\]"):
            record.metrics()


@pytest.mark.slow
def test_foreign_weights_are_refused_and_leave_no_staging_folder(tmp_path):
    """A weights.pt of dsa-moe-k2 (the same shapes) in a dsa-moe run folder was scored and its metrics rewritten."""
    prepare(tmp_path)
    base = ["stages/run.py", "--study", "recursive", "--dataset", "fashion_mnist", "--seed", "0", "--quiet"]
    for model in ("dsa-moe", "dsa-moe-k2"):
        assert run(tmp_path, *base, "--model", model).returncode == 0
    runs = tmp_path / "runs/recursive/fashion_mnist"
    metrics = runs / "dsa-moe/seed0/metrics.json"
    before = metrics.read_bytes()
    (runs / "dsa-moe/seed0/weights.pt").write_bytes((runs / "dsa-moe-k2/seed0/weights.pt").read_bytes())
    assert_one_line(run(tmp_path, *base, "--model", "dsa-moe", "--evaluate-only"), "were trained for another run")
    assert metrics.read_bytes() == before and not list(runs.glob("dsa-moe/.*.tmp"))


# ---------------------------------------------------------------------------------------------- 8. one writer

def test_a_second_pipeline_writer_is_refused_naming_the_first(tmp_path, monkeypatch):
    from itervision.pipeline.workspace import hold

    monkeypatch.chdir(tmp_path)
    with hold("make campaign"):
        r = run(tmp_path, "-m", "itervision.pipeline.workspace", "true")
        assert_one_line(r, f"is being run by `make campaign` (PID {os.getpid()})")
    assert run(tmp_path, "-m", "itervision.pipeline.workspace", "true").returncode == 0  # released


# ---------------------------------------------------------------------------------------------- provenance

def fake_runs(torch_versions, capability="AVX2"):  # the committed params' pin
    return {("fashion_mnist", "sa-mlp", sd): {"config": {"environment": {
        "packages": {"torch": v, "torchvision": "0.29.1", "timm": "1.0.31", "numpy": "2.4.6"}, "os": "Linux",
        "cpu": {"model": "Xeon", "capability": capability, "threads": 2}, "gpu": None}}}
        for sd, v in enumerate(torch_versions)}


def test_the_environment_table_names_every_stack_behind_a_study(tmp_path):
    from itervision.reporting.tables import environment_table
    from itervision.studies.common import environments

    envs = environments(fake_runs(["2.14.1", "2.14.1", "2.15.0"]))
    assert [(e["torch"], len(e["runs"])) for e in envs] == [("2.14.1", 2), ("2.15.0", 1)]
    environment_table({"environments": envs}, tmp_path)
    with open(tmp_path / "environments.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["torch"] for r in rows} == {"2.14.1", "2.15.0"}
    assert "come from 2 different environments" in (tmp_path / "environments.md").read_text()


def test_make_repro_warns_when_the_committed_runs_came_from_another_stack(tmp_path):
    import torch

    (tmp_path / "metrics/recursive").mkdir(parents=True)
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    from itervision.studies.common import environments

    (tmp_path / "metrics/recursive/aggregate.json").write_text(json.dumps(
        {"environments": environments(fake_runs(["1.0.0"]))}))
    r = run(tmp_path, "-m", "itervision.pipeline.provenance")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 0 and len(lines) == 1 and lines[0].startswith("warning:")
    assert f"torch 1.0.0 (here {torch.__version__})" in lines[0] and "dvc repro --force" in lines[0]
    (tmp_path / "metrics/recursive/aggregate.json").write_text(json.dumps(
        {"environments": environments(fake_runs([torch.__version__]))}))
    assert run(tmp_path, "-m", "itervision.pipeline.provenance").stderr == ""  # the same stack: silent
