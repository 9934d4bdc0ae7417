"""The bad-input corpus: every input a user could get wrong ends in exit status 2 and one line that names the
cause and the fix, with no traceback and no output that looks complete. Params problems are checked by the
first stage (configure) and by `python -m itervision.config.params`, which `make repro` runs before DVC reads
dvc.yaml; file problems at the stage that reads the file."""
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from helpers import ROOT, prepare

PY = sys.executable


def run(cwd, *args):
    return subprocess.run([PY, *[str(ROOT / a) if a.startswith(("stages/", "tests/")) else a for a in args]], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def assert_one_line(r, expected: str):
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    lines = [line for line in r.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr[-2000:]
    assert expected in lines[0], lines[0]
    assert "Traceback" not in r.stderr


def set_key(params: dict, dotted: str, value):
    if dotted == "new model":  # a model named `value`, listed by a study so that the name reaches every check
        params["models"][value] = {"arch": "recursive"}
        params["recursive"]["main"].append(value)
        return
    node, keys = params, dotted.split(".")
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value


PARAMS_CASES = [
    ("train.epochs", 0, "'train.epochs' = 0 is out of range: must be >= 1"),
    ("train.epochs", -2, "'train.epochs' = -2 is out of range"),
    ("train.lr", "0.001x", "'train.lr' must be a number, got '0.001x'"),
    ("train.weight_decay", "0.05", "'train.weight_decay' must be a number, got '0.05' (quoted)"),
    ("train.crop_scale", "wide", "'train.crop_scale' must be a list of numbers"),
    ("train.epochs", 1.5, "'train.epochs' must be an integer, got 1.5"),
    ("architectures.recursive.dim", -16, "'architectures.recursive.dim' = -16 is out of range"),
    ("architectures.recursive.steps", 0, "'architectures.recursive.steps' = 0 is out of range"),
    ("architectures.recursive.topk", 0, "'architectures.recursive.topk' = 0 is out of range"),
    ("train", ["a", "list"], "params 'train' must be a mapping of keys"),
    ("seeds", 5, "'seeds' must be a non-empty list of integers, got 5"),
    ("seeds", [0, 0], "'seeds' repeats seed 0"),
    ("ablation_seeds", [1], "ablation_seeds [1] must be a prefix of seeds"),
    ("train.randaugment", "rand-xyz", "'train.randaugment' = 'rand-xyz' is out of range"),
    ("recursive.main", ["sa-mlp", "dsa-moe", "dsa-moe-steps1", "nope"], "unknown model 'nope'"),
    ("new model", "../../../../escaped", "model name '../../../../escaped' under `models` is not a valid name"),
    ("new model", "sa mlp", "model name 'sa mlp' under `models` is not a valid name"),
    ("seeds", [0, 2 ** 63], "'seeds' holds 9223372036854775808; seeds are integers in [0, 2147483647]"),
    ("seeds", list(range(10_000)), "'seeds' lists 10000 seeds; at most 64"),
    ("seeds", [0, 1, 2, 2], "'seeds' repeats seed 2"),
    ("models.sa-mlp.arch", "nope", "names arch 'nope'"),
    ("train.lerning_rate", 1.0, "unknown key 'train.lerning_rate'"),
    ("evaluate.trace_imgs", 4, "unknown key 'evaluate.trace_imgs'"),
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    prepare(root)
    return root


@pytest.mark.parametrize("key,value,expected", PARAMS_CASES, ids=[f"{k}={str(v)[:20]}" for k, v, _ in PARAMS_CASES])
def test_bad_params_value(tmp_path, key, value, expected):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    set_key(params, key, value)
    work = tmp_path / "a" / "b" / "c" / "d"
    work.mkdir(parents=True)
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    for cmd in (["-m", "itervision.config.params"], ["stages/configure.py"]):
        assert_one_line(run(work, *cmd), expected)
    assert not (work / "configs").exists() and not (tmp_path / "escaped").exists()


def test_duplicate_params_keys_are_refused_as_dvc_refuses_them(tmp_path):
    """PyYAML keeps the last of two equal keys; DVC refuses the file: the params check must not read other values
    than DVC does."""
    text = (ROOT / "params.yaml").read_text().replace("  epochs: 1\n", "  epochs: 1\n  epochs: 3\n", 1)
    (tmp_path / "params.yaml").write_text(text)
    assert_one_line(run(tmp_path, "-m", "itervision.config.params"), "duplicate key 'epochs'")


def test_a_model_name_with_a_space_fails_at_the_check_not_at_a_stage(tmp_path):
    """The name rule holds for stage arguments too: a bad name is one line from argparse, not a traceback."""
    r = run(tmp_path, "stages/profile_model.py", "--study", "recursive", "--dataset", "fashion_mnist", "--model",
            "sa mlp")
    assert_one_line(r, "'sa mlp' is not a valid name")


@pytest.mark.parametrize("seed", [str(2 ** 63), "-1", "x"])
def test_a_seed_out_of_range_is_one_line(tmp_path, seed):
    r = run(tmp_path, "stages/run.py", "--study", "recursive", "--dataset", "fashion_mnist", "--model", "sa-mlp",
            "--seed", seed)
    assert_one_line(r, "argument --seed")


def test_set_scale_out_a_folder_is_one_line(tmp_path):
    assert_one_line(run(ROOT, "stages/set_scale.py", "tiny", "--out", str(tmp_path)), "is a folder")


@pytest.mark.slow
def test_evaluate_only_refuses_weights_trained_under_another_config(tmp_path):
    """Silent wrong result of the past: --evaluate-only scored old weights under a changed resolved config."""
    import json

    prepare(tmp_path)
    args = ["stages/run.py", "--study", "recursive", "--dataset", "fashion_mnist", "--model", "dsa-moe", "--seed",
            "0", "--quiet"]
    assert run(tmp_path, *args).returncode == 0
    again = run(tmp_path, *args, "--evaluate-only")
    assert again.returncode == 0, again.stderr[-2000:]  # the same config: scored again
    model_json = tmp_path / "configs/resolved/fashion_mnist/dsa-moe/model.json"
    spec = json.loads(model_json.read_text())
    spec["config"]["topk"] = 1
    model_json.write_text(json.dumps(spec))
    metrics = tmp_path / "runs/recursive/fashion_mnist/dsa-moe/seed0/metrics.json"
    before = metrics.read_bytes()
    assert_one_line(run(tmp_path, *args, "--evaluate-only"), "was trained with another model config than "
                                                             "configs/resolved")
    assert metrics.read_bytes() == before


def test_a_second_process_on_the_same_run_fails_in_one_line(tmp_path, monkeypatch):
    """A killed dvc parent leaves its stage child running; a rerun must not start a second writer of that run."""
    from itervision.runs import RunRecord

    prepare(tmp_path)
    monkeypatch.chdir(tmp_path)
    with RunRecord("recursive", "fashion_mnist", "sa-mlp", 0).lock():
        r = run(tmp_path, "stages/run.py", "--study", "recursive", "--dataset", "fashion_mnist", "--model", "sa-mlp",
                "--seed", "0", "--quiet")
    assert_one_line(r, f"sa-mlp seed 0 on fashion_mnist is being trained by process {os.getpid()}")
    assert not (tmp_path / "runs/recursive/fashion_mnist/sa-mlp/seed0").exists()


@pytest.mark.slow
def test_ctrl_c_during_a_run_is_one_line_and_leaves_no_complete_looking_run(tmp_path):
    # 40 epochs with a checkpoint at the first curve point (step 20 of 800): the signal lands with most of the
    # run still to go. The child gets SIGINT's default back: pytest started in the background by a
    # non-interactive shell (`nohup ... &`) ignores SIGINT, a child inherits that, and the run then finished (rc 0)
    prepare(tmp_path, curve_points=40, epochs=40)
    proc = subprocess.Popen([PY, str(ROOT / "stages/run.py"), "--study", "recursive", "--dataset", "fashion_mnist",
                             "--model", "dsa-moe", "--seed", "0", "--quiet"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    ckpt = tmp_path / "checkpoints/recursive/fashion_mnist/dsa-moe/seed0/last.pt"
    deadline = time.time() + 300
    while not ckpt.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    lines = [x for x in err.splitlines() if x.strip()]
    assert lines == [lines[-1]] and lines[-1].startswith("error: interrupted (Ctrl-C)") and "Traceback" not in err
    assert not (tmp_path / "runs/recursive/fashion_mnist/dsa-moe/seed0").exists()  # only the hidden staging folder


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["file-size-limit", "not-a-folder"])
def test_a_full_disk_or_unwritable_run_folder_is_one_line(tmp_path, fault):
    """ulimit -f (a write fails part-way, as on a full disk) or a file where the run folder must go."""
    import resource

    prepare(tmp_path)
    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    preexec = limit_file_size if fault == "file-size-limit" else None
    if fault == "not-a-folder":
        (tmp_path / "runs").write_text("a file where a folder must be")
    r = subprocess.run([PY, str(ROOT / "stages/run.py"), "--study", "recursive", "--dataset", "fashion_mnist",
                        "--model", "sa-mlp", "--seed", "0", "--quiet"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600, preexec_fn=preexec)
    expected = "File too large" if fault == "file-size-limit" else "Not a directory"
    assert_one_line(r, expected)
    assert "then rerun the command" in r.stderr
    if fault == "file-size-limit":
        assert not (tmp_path / "runs/recursive/fashion_mnist/sa-mlp/seed0/metrics.json").exists()


@pytest.mark.parametrize("text,expected", [
    ("train: [unclosed\n", "not valid YAML at line"),
    ("- a list\n", "must be a mapping of groups"),
])
def test_malformed_params_file(tmp_path, text, expected):
    (tmp_path / "params.yaml").write_text(text)
    assert_one_line(run(tmp_path, "stages/configure.py"), expected)


@pytest.mark.parametrize("damage,expected", [
    ("truncate", "is not a readable gzip file"),
    ("not-gzip", "is not a readable gzip file"),
    ("missing", "does not hold the fashion_mnist files"),
])
def test_bad_fashion_mnist_source(tmp_path, damage, expected):
    prepare(tmp_path)
    shutil.rmtree(tmp_path / "data/prepared")
    f = tmp_path / "source/fashion_mnist/train-images-idx3-ubyte.gz"
    if damage == "truncate":
        f.write_bytes(f.read_bytes()[:1000])
    elif damage == "not-gzip":
        f.write_bytes(b"<html>not found</html>")
    else:
        f.unlink()
    assert_one_line(run(tmp_path, "stages/make_subset.py", "--dataset", "fashion_mnist"), expected)
    assert not (tmp_path / "data/prepared/fashion_mnist").exists()


def test_unknown_dataset_and_missing_imagenet_root(tiny):
    assert_one_line(run(tiny, "stages/make_subset.py", "--dataset", "cifar7"), "is not under data.sources")


def test_corrupt_prepared_split(tmp_path):
    prepare(tmp_path)
    (tmp_path / "data/prepared/fashion_mnist/train.npz").write_bytes(b"PK\x03\x04 truncated")
    r = run(tmp_path, "stages/run.py", "--study", "recursive", "--dataset", "fashion_mnist", "--model", "sa-mlp",
            "--seed", "0", "--quiet")
    assert_one_line(r, "train.npz is unreadable (BadZipFile); regenerate it with "
                       "`dvc repro --force make_subset@fashion_mnist`")
    assert not (tmp_path / "runs/recursive/fashion_mnist/sa-mlp/seed0/metrics.json").exists()


def test_prepared_data_that_does_not_match_its_manifest(tmp_path):
    import numpy as np

    prepare(tmp_path)
    f = tmp_path / "data/prepared/fashion_mnist/train.npz"
    with np.load(f) as d:
        arrays = dict(d)
    arrays["labels"] = arrays["labels"][::-1].copy()
    np.savez(f, **arrays)
    r = run(tmp_path, "stages/run.py", "--study", "recursive", "--dataset", "fashion_mnist", "--model", "sa-mlp",
            "--seed", "0", "--quiet")
    assert_one_line(r, "does not match the checksum in manifest.json")


@pytest.mark.slow
@pytest.mark.parametrize("content", ["list", "garbage", "tensor"])
def test_foreign_checkpoint(tmp_path, content):
    prepare(tmp_path)
    ckpt = tmp_path / "checkpoints/recursive/fashion_mnist/sa-mlp/seed0/last.pt"
    ckpt.parent.mkdir(parents=True)
    if content == "list":
        torch.save([1, 2, 3], ckpt)
    elif content == "tensor":
        torch.save(torch.zeros(3), ckpt)
    else:
        ckpt.write_bytes(pickle.dumps(object))
    r = run(tmp_path, "stages/run.py", "--study", "recursive", "--dataset", "fashion_mnist", "--model", "sa-mlp",
            "--seed", "0", "--quiet")
    assert_one_line(r, f"checkpoint {Path('checkpoints/recursive/fashion_mnist/sa-mlp/seed0/last.pt')}")
    assert "rm -r checkpoints/recursive/fashion_mnist/sa-mlp/seed0" in r.stderr


@pytest.mark.slow
def test_stale_temp_files_of_interrupted_writes_are_removed(tmp_path):
    prepare(tmp_path)
    ckdir = tmp_path / "checkpoints/recursive/fashion_mnist/sa-mlp/seed0"
    ckdir.mkdir(parents=True)
    stale = ckdir / ".last.pt.k3j2l1.tmp"
    stale.write_bytes(b"half a checkpoint")
    r = run(tmp_path, "tests/train_with_fault.py", "sa-mlp", "0", "crash", "25")
    assert r.returncode == 137 and not stale.exists() and (ckdir / "last.pt").exists()
    assert not list(ckdir.glob(".*.tmp"))


@pytest.fixture(scope="module")
def results(built_repo, tmp_path_factory):
    """A copy of the session's tiny repository with its complete results."""
    dst = tmp_path_factory.mktemp("results") / "repo"
    shutil.copytree(built_repo, dst, symlinks=True)
    return dst


@pytest.fixture
def broken(results, tmp_path):
    dst = tmp_path / "repo"
    shutil.copytree(results, dst, symlinks=True)
    return dst


RUN = "runs/recursive/fashion_mnist/sa-mlp/seed1"
FIX = "regenerate it with `dvc repro --force pipelines/recursive/dvc.yaml:run_recursive@fashion_mnist-sa-mlp-1`"


@pytest.mark.slow
@pytest.mark.parametrize("name,damage,expected", [
    ("predictions.npz", b"PK\x03\x04 not a zip", f"{RUN}/predictions.npz is unreadable (BadZipFile); {FIX}"),
    ("metrics.json", b'{"splits": {"test"', f"{RUN}/metrics.json is not valid JSON"),
    ("metrics.json", b'{"model": "sa-mlp"}', f"{RUN}/metrics.json lacks 'splits'; {FIX}"),
    ("train_log.json", None, f"{RUN}/train_log.json is missing; {FIX}"),
    ("config.json", b"[]", f"{RUN}/config.json does not hold a JSON object; {FIX}"),
])
def test_a_broken_run_is_named_by_the_aggregate_stage(broken, name, damage, expected):
    target = broken / RUN / name
    target.unlink() if damage is None else target.write_bytes(damage)
    before = (broken / "metrics/recursive/aggregate.json").read_bytes()
    assert_one_line(run(broken, "stages/aggregate.py", "--study", "recursive"), expected)
    assert (broken / "metrics/recursive/aggregate.json").read_bytes() == before  # nothing half-written


@pytest.mark.slow
def test_every_broken_run_is_named_at_once(broken):
    for seed in (0, 1):
        (broken / f"runs/recursive/fashion_mnist/dsa-moe/seed{seed}/metrics.json").write_text("{")
    r = run(broken, "stages/aggregate.py", "--study", "recursive")
    assert_one_line(r, "dsa-moe/seed0/metrics.json is not valid JSON")
    assert "and 1 more" in r.stderr and "dsa-moe/seed1/metrics.json" in r.stderr


@pytest.mark.slow
def test_a_missing_run_and_a_missing_profile(broken):
    shutil.rmtree(broken / "runs/sparseformer/fashion_mnist/sf-static-9/seed0")
    (broken / "runs/sparseformer/fashion_mnist/sf-recurrent/profile.json").unlink()
    r = run(broken, "stages/aggregate.py", "--study", "sparseformer")
    assert_one_line(r, "runs/sparseformer/fashion_mnist/sf-static-9/seed0/config.json is missing; regenerate it with "
                       "`dvc repro --force pipelines/sparseformer/dvc.yaml:"
                       "run_sparseformer@fashion_mnist-sf-static-9-0`")


@pytest.mark.slow
def test_a_truncated_aggregate_before_report(broken):
    (broken / "metrics/recursive/aggregate.json").write_text('{"seeds": [0,')
    assert_one_line(run(broken, "stages/report.py", "--study", "recursive"),
                    "metrics/recursive/aggregate.json is not valid JSON")


def test_gate_input_errors_are_exit_2_never_1(tmp_path):
    (tmp_path / "bad.json").write_text("{")
    for args in (["--diff-json", str(tmp_path / "missing.json")], ["--diff-json", str(tmp_path / "bad.json")],
                 ["no-such-revision-xyz"]):
        r = run(ROOT, "stages/check_regressions.py", *args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr


def test_repro_entry_checks_params_before_dvc_reads_them(tmp_path):
    """`make repro` (pipeline/repro.py) checks params before DVC reads them: seeds: 5 is our one line, not DVC's
    parse error."""
    import inspect

    from itervision.pipeline import repro

    text = (ROOT / "Makefile").read_text()
    recipe = text.split("\nrepro:")[1].split("\n\n")[0]
    assert "itervision.pipeline.repro" in recipe
    source = inspect.getsource(repro.main)
    assert source.index("load_params(") < source.index("_status()") < source.index("reproduce(")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["seeds"] = 5
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert_one_line(run(tmp_path, "-m", "itervision.config.params"), "'seeds' must be a non-empty list of integers")
