"""Command-line behaviour: inspect figures, one-line errors, the regression gate, scales."""
import json
import subprocess
import sys

import pytest
import yaml

from helpers import ROOT

PY = sys.executable


def run(*args, cwd=ROOT):
    return subprocess.run([PY, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_inspect_paper_scale_reproduces_the_published_efficiency_figures():
    r = run("-m", "itervision.inspect", "--model", "sa-mlp", "--scale", "paper", "--json", "--no-fvcore")
    assert r.returncode == 0, r.stderr
    sa = json.loads(r.stdout)
    r = run("-m", "itervision.inspect", "--model", "dsa-moe", "--scale", "paper", "--json")
    dsa = json.loads(r.stdout)
    assert sa["stored_params"] == pytest.approx(13.13e6, rel=0.01)
    assert dsa["active_params"] == pytest.approx(7.10e6, rel=0.01)
    assert dsa["block_mac_ratio"] == pytest.approx(0.52, rel=0.01)
    assert dsa["avg_sparsity"] == pytest.approx(0.358, rel=0.01)
    assert len(dsa["macs_per_exit"]) == 16 and dsa["macs_per_exit"][-1] == dsa["macs_per_image"]
    assert dsa["fvcore"]["matmul_vs_analytic"] == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("args,expected", [
    (["-m", "itervision.inspect", "--model", "nope"], "unknown model 'nope'"),
    (["stages/make_subset.py", "--dataset", "imagenet999"], "has no entry under subset"),
    (["stages/evaluate.py", "--dataset", "fashion_mnist", "--model", "sa-mlp", "--seed", "99"], "not found"),
])
def test_user_errors_are_one_line_without_traceback(args, expected):
    r = run(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and expected in lines[0], r.stderr


def test_malformed_and_unknown_params_are_named(tmp_path):
    bad = tmp_path / "params.yaml"
    bad.write_text("train: [unclosed\n")
    r = run(str(ROOT / "stages/train.py"), "--dataset", "x", "--model", "sa-mlp", "--seed", "0", cwd=tmp_path)
    assert r.returncode == 2 and "not valid YAML at line" in r.stderr and "Traceback" not in r.stderr
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["train"]["learning_rate"] = 1.0
    bad.write_text(yaml.safe_dump(params))
    (tmp_path / "data/prepared/fashion_mnist").mkdir(parents=True)
    (tmp_path / "data/prepared/fashion_mnist/manifest.json").write_text(
        json.dumps({"classes": ["a", "b"], "channels": 1, "mean": [0.5], "std": [0.5]}))
    r = run(str(ROOT / "stages/train.py"), "--dataset", "fashion_mnist", "--model", "sa-mlp", "--seed", "0",
            cwd=tmp_path)
    assert r.returncode == 2 and "unknown train keys learning_rate" in r.stderr


def test_regression_gate_on_a_constructed_diff(tmp_path):
    diff = {"metrics/recursive.json": {
        "fashion_mnist.dsa-moe.top1.mean": {"old": 0.80, "new": 0.77, "diff": -0.03},
        "fashion_mnist.sa-mlp.top1.mean": {"old": 0.80, "new": 0.79, "diff": -0.01},
        "fashion_mnist.sa-mlp.top1.ci95": {"old": 0.01, "new": 0.30, "diff": 0.29},
        "fashion_mnist.new-model.top1.mean": {"new": 0.5}}}
    path = tmp_path / "diff.json"
    path.write_text(json.dumps(diff))
    r = run("stages/check_regressions.py", "--diff-json", str(path))
    assert r.returncode == 1
    assert "REGRESSION metrics/recursive.json:fashion_mnist.dsa-moe.top1.mean" in r.stdout
    assert "2 accuracy metrics checked, 1 fell by more than 0.02" in r.stdout
    diff["metrics/recursive.json"]["fashion_mnist.dsa-moe.top1.mean"]["new"] = 0.785
    path.write_text(json.dumps(diff))
    assert run("stages/check_regressions.py", "--diff-json", str(path)).returncode == 0


def test_scales_render_and_cpu_params_are_the_shipped_file(tmp_path):
    assert (ROOT / "params.yaml").read_text() == (ROOT / "configs/scales/cpu.yaml").read_text()
    for scale in ("paper", "tiny"):
        out = tmp_path / f"{scale}.yaml"
        assert run("stages/set_scale.py", scale, "--out", str(out)).returncode == 0
        params = yaml.safe_load(out.read_text())
        assert params["scale"] == scale
    paper = yaml.safe_load((tmp_path / "paper.yaml").read_text())
    assert paper["architectures"]["recursive"]["dim"] == 512 and paper["run"]["launcher"].startswith("torchrun")
    assert run("stages/set_scale.py", "huge", "--out", str(tmp_path / "x.yaml")).returncode == 2


def test_paper_plan_checks_structure_without_training():
    r = run("stages/check_paper_plan.py", "--no-flops")
    assert r.returncode == 0, r.stderr
    assert "data/splits/imagenet100.txt: 100 synsets" in r.stdout and "total: 165 training runs" in r.stdout


def test_every_stage_script_has_help():
    for script in sorted((ROOT / "stages").glob("[a-z]*.py")):
        r = run(str(script), "--help")
        assert r.returncode == 0 and "usage" in r.stdout, script.name
