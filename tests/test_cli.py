"""Command-line behaviour: describe figures, one-line errors, the regression gate, scales, the paper plan."""
import json
import os
import subprocess
import sys

import pytest
import yaml

from helpers import ROOT
from itervision.pipeline.gate import CannotCompare, compare, sides_from_diff

PY = sys.executable


def run(*args, cwd=ROOT, env=None):
    return subprocess.run([PY, *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.slow
def test_describe_paper_scale_reproduces_the_published_efficiency_figures():
    r = run("-m", "itervision.planning.describe", "--model", "sa-mlp", "--scale", "paper", "--json", "--no-fvcore")
    assert r.returncode == 0, r.stderr
    sa = json.loads(r.stdout)
    r = run("-m", "itervision.planning.describe", "--model", "dsa-moe", "--scale", "paper", "--json")
    dsa = json.loads(r.stdout)
    assert sa["stored_params"] == pytest.approx(13.13e6, rel=0.01)
    assert dsa["active_params"] == pytest.approx(7.10e6, rel=0.01)
    assert dsa["block_mac_ratio"] == pytest.approx(0.52, rel=0.01)
    assert dsa["avg_sparsity"] == pytest.approx(0.358, rel=0.01)
    assert len(dsa["macs_per_exit"]) == 16 and dsa["macs_per_exit"][-1] == dsa["macs_per_image"]
    assert dsa["fvcore"]["matmul_vs_analytic"] == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("args,expected", [
    (["-m", "itervision.planning.describe", "--model", "nope"], "unknown model 'nope'"),
    (["stages/make_subset.py", "--dataset", "imagenet999"], "is not under data.sources in params.yaml"),
    (["stages/run.py", "--study", "recursive", "--dataset", "fashion_mnist", "--model", "nope", "--seed", "0"],
     "configs/resolved/fashion_mnist/nope/model.json is missing; regenerate it with `dvc repro configure`"),
    (["stages/report.py", "--study", "recursive"], "metrics/recursive/aggregate.json is missing"),
])
def test_user_errors_are_one_line_without_traceback(args, expected, tmp_path):
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    r = run(*[str(ROOT / a) if a.startswith("stages/") else a for a in args], cwd=tmp_path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and expected in lines[0], r.stderr


def diff_file(tmp_path, entries: dict, name="diff.json"):
    path = tmp_path / name
    path.write_text(json.dumps(entries))
    return str(path)


def test_gate_flags_only_drops_the_intervals_call_real():
    diff = {"metrics/recursive.json": {
        "fashion_mnist.dsa-moe.top1.mean": {"old": 0.80, "new": 0.77},       # 3 points, intervals 1 and 1: real
        "fashion_mnist.dsa-moe.top1.ci95": {"old": 0.01, "new": 0.01},
        "fashion_mnist.sa-mlp.top1.mean": {"old": 0.80, "new": 0.77},        # 3 points, intervals 3 and 3: noise
        "fashion_mnist.sa-mlp.top1.ci95": {"old": 0.03, "new": 0.03},
        "fashion_mnist.sa-moe.top1.mean": {"old": 0.80, "new": 0.7996},      # floating point of another machine
        "fashion_mnist.sa-moe.top1.ci95": {"old": 0.0, "new": 0.0},
        "fashion_mnist.gone.top1.mean": {"old": 0.80},                         # a metric that disappeared
        "fashion_mnist.new-model.top1.mean": {"new": 0.5}},
        "metrics/recursive_timing.json": {"training.sa-mlp.top1.mean": {"old": 0.9, "new": 0.1}}}
    with pytest.raises(CannotCompare, match="fashion_mnist.gone.top1.mean is in the baseline but missing here"):
        compare(*sides_from_diff(diff), min_drop=0.005)  # a metric that disappeared: no partial comparison
    del diff["metrics/recursive.json"]["fashion_mnist.gone.top1.mean"]
    rows = compare(*sides_from_diff(diff), min_drop=0.005)
    verdicts = {r["key"].split(".")[1]: r["verdict"] for r in rows}
    assert verdicts == {"dsa-moe": "REGRESSION", "sa-mlp": "ok", "sa-moe": "ok", "new-model": "new"}
    assert rows[0]["verdict"] == "REGRESSION"  # regressions first
    assert rows[0]["allowed"] == pytest.approx((0.01 ** 2 + 0.01 ** 2) ** 0.5)


def whole_diff(change: dict | None = None) -> dict:
    """A `dvc metrics diff --all --json` of every gated key params say exist, all equal, then `change` applied."""
    from itervision.config.params import load_params
    from itervision.pipeline.gate import expected_keys

    diff = {f: {k: {"old": 0.8, "new": 0.8} for k in keys} for f, keys in expected_keys(load_params(
        ROOT / "params.yaml")).items()}
    for f, keys in (change or {}).items():
        diff.setdefault(f, {}).update(keys)
    return diff


def test_gate_refuses_a_partial_comparison(tmp_path):
    """A diff without one model's keys, or without a whole gated file, cannot pass (exit 2, naming it)."""
    ok = run("stages/check_regressions.py", "--diff-json", diff_file(tmp_path, whole_diff()))
    assert ok.returncode == 0, ok.stderr
    partial = whole_diff()
    del partial["metrics/recursive.json"]["fashion_mnist.dsa-moe.top1.mean"]
    r = run("stages/check_regressions.py", "--diff-json", diff_file(tmp_path, partial, "p.json"))
    assert r.returncode == 2 and "lacks metrics/recursive.json:fashion_mnist.dsa-moe.top1.mean" in r.stderr
    no_file = whole_diff()
    del no_file["metrics/sparseformer.json"]
    r = run("stages/check_regressions.py", "--diff-json", diff_file(tmp_path, no_file, "f.json"))
    assert r.returncode == 2 and "has no metrics/sparseformer.json" in r.stderr


def test_gate_exit_codes_and_output(tmp_path):
    n = sum(len(v) for v in whole_diff().values())
    bad = whole_diff({"metrics/recursive.json": {"fashion_mnist.dsa-moe.top1.mean": {"old": 0.80, "new": 0.70}}})
    r = run("stages/check_regressions.py", "--diff-json", diff_file(tmp_path, bad))
    assert r.returncode == 1 and r.stdout.splitlines()[0].startswith("REGRESSION")
    assert f"{n} accuracy metrics compared" in r.stdout and "1 regressions" in r.stdout
    same = whole_diff()
    r = run("stages/check_regressions.py", "--diff-json", diff_file(tmp_path, same))
    assert r.returncode == 0 and f"{n} accuracy metrics compared" in r.stdout
    scales = diff_file(tmp_path, {"params.yaml": {"scale": {"old": "cpu", "new": "tiny"}}}, "params.json")
    r = run("stages/check_regressions.py", "--diff-json", diff_file(tmp_path, same), "--params-diff-json", scales)
    assert r.returncode == 2 and "different scales (cpu vs tiny)" in r.stderr
    for broken in ("missing.json", diff_file(tmp_path, {}, "x.json")):
        if broken != "missing.json":
            (tmp_path / "x.json").write_text("{truncated")
        r = run("stages/check_regressions.py", "--diff-json", str(tmp_path / broken) if broken == "missing.json"
                else broken)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert run("stages/check_regressions.py").returncode == 2
    assert run("stages/check_regressions.py", "--no-such-flag").returncode == 2


def test_scales_render_and_cpu_params_are_the_shipped_file(tmp_path):
    assert (ROOT / "params.yaml").read_text() == (ROOT / "configs/scales/cpu.yaml").read_text()
    for scale in ("paper", "tiny", "paper-smoke"):
        out = tmp_path / f"{scale}.yaml"
        assert run("stages/set_scale.py", scale, "--out", str(out)).returncode == 0
        params = yaml.safe_load(out.read_text())
        assert params["scale"] == scale and "base" not in params
    paper = yaml.safe_load((tmp_path / "paper.yaml").read_text())
    assert paper["architectures"]["recursive"]["dim"] == 512 and paper["run"]["gpus"] == 8
    smoke = yaml.safe_load((tmp_path / "paper-smoke.yaml").read_text())
    assert smoke["architectures"] == paper["architectures"] and smoke["models"] == paper["models"]
    assert smoke["train"]["randaugment"] == paper["train"]["randaugment"] and smoke["train"]["epochs"] == 1
    assert run("stages/set_scale.py", "huge", "--out", str(tmp_path / "x.yaml")).returncode == 2


@pytest.mark.slow
def test_paper_plan_fast_checks_structure_roots_and_cost(tmp_path):
    r = run("stages/check_paper_plan.py", "--scale", "paper", "--fast")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "data/splits/imagenet100.txt: 100 synsets" in out and "total: 205 training runs" in out
    assert out.splitlines()[1] == "== summary ==" and "205 training runs" in out.splitlines()[2]  # the answer first
    assert "warning: data.sources.imagenet100 = data/sources/imagenet100.csv does not exist" in out
    assert "utilisation" in out and "GPU-hours" in out
    line = next(x for x in out.splitlines() if x.startswith("recursive") and " sa-mlp " in x and "cifar10" in x)
    assert line.split()[3] == "5" and line.split()[4] == "200"  # 5 seeds, 200 epochs
    assert line.split()[6] == "128" and "estimate" in line.split()


@pytest.mark.slow
def test_paper_plan_uses_measured_rates_where_a_gpu_benchmark_has_them(tmp_path):
    """Hours from measured images/s at the per-GPU batch (interpolated in log batch), labelled and sourced; the
    rest stay FLOP estimates."""
    rates = {"gpu": "Test GPU", "date": "2026-12-04", "configs": {
        "recursive/cifar10/sa-mlp": {"train_images_per_s": {"64": 500.0, "256": 2000.0}},
        "recursive/cifar10/dsa-moe": {"train_images_per_s": {"128": 400.0}, "compiled": {
            "mode": "reduce-overhead", "batch": 128, "compile_seconds": 100.0, "train_images_per_s": 5000.0,
            "speedup": 12.5}},
        "recursive/cifar100/dsa-moe": {"train_images_per_s": {"128": 400.0}, "compiled": {
            "mode": "default", "batch": 128, "compile_seconds": 100.0, "train_images_per_s": 9000.0}},
        "recursive/mnist/dsa-moe": {"train_images_per_s": {"128": 200.0}}}}
    path = tmp_path / "test-gpu.json"
    path.write_text(json.dumps(rates))
    r = run("stages/check_paper_plan.py", "--scale", "paper", "--fast", "--gpu", str(path))
    assert r.returncode == 0, r.stderr
    assert f"measured: Test GPU rates from {path} (2026-12-04" in r.stdout
    costs = r.stdout.split("\nplacement on ")[0]  # the cost table, not the placement after it
    line = next(x for x in costs.splitlines() if x.startswith("recursive") and " sa-mlp " in x and "cifar10" in x)
    # per-GPU batch 1024 / 8 = 128, halfway in log batch between 64 and 256: 1250 img/s; the paper recipe
    # compiles the recursive step, but no compiled rate was measured for sa-mlp: the eager one, labelled so;
    # 5 runs x 200 epochs x 45,000 images / 1250 / 3600 = 10.0 GPU-hours
    assert "measured" in line.split() and "10.0" in line.split()
    rows = {x.split()[2]: x.split() for x in costs.splitlines() if x.startswith("recursive") and " dsa-moe " in x}
    # compiled as the recipe compiles (reduce-overhead): 5 x (200 x 45,000 / 5000 + 100 s of compiling on each
    # of the 8 GPUs) / 3600
    assert "compiled" in rows["cifar10"] and f"{5 * (1800 + 800) / 3600:.1f}" in rows["cifar10"]
    # a compiled rate of another mode does not stand for this recipe; the same model's reduce-overhead speed-up
    # measured on cifar10 (x 12.5) does, on cifar100's eager rate, labelled compiled~: 5 x (200 x 45,000 / 5000
    # + 8 x 100) / 3600
    assert "compiled~" in rows["cifar100"] and f"{5 * (1800 + 800) / 3600:.1f}" in rows["cifar100"]
    assert "compiled~" in rows["mnist"] and f"{5 * (200 * 55_000 / (200 * 12.5) + 800) / 3600:.1f}" in rows["mnist"]
    assert "estimate" in rows["fashion_mnist"]
    missing = run("stages/check_paper_plan.py", "--scale", "paper", "--fast", "--gpu", "no-such-gpu")
    assert missing.returncode == 2 and "no measured rates for GPU 'no-such-gpu'" in missing.stderr


def test_makespan_is_list_scheduling_of_whole_runs_on_gpu_groups():
    """Hand-computed: runs of 8 GPUs; on 16 GPUs two slots. Run wall hours = GPU-hours / 8."""
    from itervision.planning.plan import ModelPlan, makespan

    def plan(runs, gpu_hours_per_run):  # a measured rate that gives exactly these GPU-hours per run
        mp = ModelPlan("s", "m", "d", runs, 1, 3600, 1.0, 128, 8)
        mp.measured = {"images_per_s": 1.0 / gpu_hours_per_run, "batch": 128, "compiled": False,
                       "compile_seconds": 0.0}
        return mp

    plans = [plan(1, 24.0), plan(3, 8.0)]  # wall hours per run: 3, 1, 1, 1
    assert makespan(plans, 8, 0.1) == pytest.approx(6.0)    # one slot: everything in a row
    assert makespan(plans, 16, 0.1) == pytest.approx(3.0)   # longest first: [3], [1, 1, 1]
    assert makespan(plans, 64, 0.1) == pytest.approx(3.0)   # bounded by the longest run
    assert makespan([plan(4, 8.0)], 16, 0.1) == pytest.approx(2.0)


@pytest.mark.slow
def test_every_stage_script_has_help():
    for script in sorted((ROOT / "stages").glob("[a-z]*.py")):
        r = run(str(script), "--help")
        assert r.returncode == 0 and "usage" in r.stdout, script.name


@pytest.mark.slow
def test_the_lanes_partition_the_suite_and_the_parallel_run_collects_the_serial_runs_tests():
    """`make test` runs the fast tests (TEST_WORKERS), the slow ones on their own pytest-xdist workers
    (E2E_WORKERS), then the serial ones alone; `make test-fast` the first and the fast serial ones. The lanes
    partition the suite."""
    def recipes(target):
        out = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True).stdout
        return [line for line in out.splitlines() if "-m pytest" in line]

    assert [r.split("-m pytest ")[1] for r in recipes("test")] == [
        '-q -n "$TEST_WORKERS" -m "not slow and not serial"', '-q -n "$E2E_WORKERS" -m "slow and not serial"',
        "-q -m serial || [ $? = 5 ]"]
    assert [r.split("-m pytest ")[1] for r in recipes("test-fast")] == [
        '-q -n "$TEST_WORKERS" -m "not slow and not serial"', '-q -m "serial and not slow" || [ $? = 5 ]']

    # one collection with every test's markers (tests/lane_markers.py); each lane's -m expression is evaluated by
    # pytest's own expression code, as `pytest -m` evaluates it
    from _pytest.mark.expression import Expression

    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "lane_markers"], cwd=ROOT,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "tests")}).stdout
    marks = {node: set(names.split(",")) - {""}
             for _, node, names in (line.split("\t") for line in out.splitlines() if line.startswith("LANE\t"))}

    def collected(expression=None):
        if expression is None:
            return set(marks)
        rule = Expression.compile(expression)
        return {node for node, m in marks.items() if rule.evaluate(lambda name, **kw: name in m)}

    everything, fast, slow = collected(), collected("not slow"), collected("slow")
    assert len(everything) > 400 and fast and slow and fast.isdisjoint(slow) and fast | slow == everything
    parallel, serial = collected("not serial"), collected("serial")
    assert serial and parallel.isdisjoint(serial) and parallel | serial == everything
    lanes = [collected("not slow and not serial"), collected("slow and not serial"), serial]  # make test's three
    assert all(lanes) and sum(map(len, lanes)) == len(everything) and set().union(*lanes) == everything
    # pytest-xdist itself refuses to run when its workers collect different tests ("Different tests were
    # collected between gw0 and gw1"), so the parallel lane runs exactly `parallel`
    torchrun = {"tests/test_engine.py::test_one_and_two_processes_train_the_same_recipe",
                "tests/test_engine.py::test_a_compiled_step_under_two_processes_trains_like_the_eager_one"}
    assert torchrun <= slow  # built_repo users are guarded by conftest.py
