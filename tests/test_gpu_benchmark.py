"""benchmarks/gpu_speed.py (`make gpu-benchmark`) run on the CPU at the tiny scale (--device cpu runs the same
code): the placement's batches of every configuration first, the routed MoE kernel and the per-exit inference
figures, what the budget leaves out listed, the file written as it goes; and its output drives the placement."""
import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT
from itervision.config.matrix import model_spec, run_spec, study_models
from itervision.config.params import check_params
from itervision.config.scales import render_scale
from itervision.planning.placement import choose, options


def bench(out, budget):
    r = subprocess.run([sys.executable, "benchmarks/gpu_speed.py", "--device", "cpu", "--scale", "tiny",
                        "--budget-seconds", str(budget), "--out", str(out), "--steps", "1", "--warmup", "1"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "2"})
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_the_gpu_benchmark_measures_what_the_placement_needs_first_and_a_cut_short_one_keeps_its_figures(tmp_path):
    """First a budget that ends after the first few figures (a job starts only with 10 s left: 12 s leave about two
    seconds of work): the file holds them and names every job it skipped. Then a whole run on the same device: it
    adds to that file instead of replacing it, and holds every figure the placement reads. Its budget, 115 s, leaves
    room for every job but compiling on a loaded 2-core machine (60 s once ran out before the grouped-kernel figure)
    and stays below the 120 s a compile job needs, which it must list as skipped."""
    out = tmp_path / "cpu.json"
    first = bench(out, 12)
    measured = [k for k, e in first["configs"].items() if e.get("train_images_per_s")]
    assert measured and first["skipped"]

    p = check_params(render_scale("tiny"))
    pairs = [(s, ds, m) for s in p.studies for ds, m in study_models(p, s)]
    res = bench(out, 115)
    assert res["errors"] == []
    assert all(res["configs"][k]["train_images_per_s"] for k in measured)
    assert any("earlier figures kept" in n for n in res.get("notes", []))
    for s, ds, m in pairs:
        glob = run_spec(p, m, ds).train.global_batch
        rates = res["configs"][f"{s}/{ds}/{m}"]["train_images_per_s"]
        assert {str(glob), str(glob // 2)} <= set(rates) and all(v > 0 for v in rates.values()), (m, rates)
        # these rates are what the placement reads: the global batch on one GPU is a measured option
        one = [o for o in options(res["configs"][f"{s}/{ds}/{m}"], glob, 10_000, 80.0) if o.world == 1][0]
        assert one.rate_basis == "measured" and one.images_per_s == rates[str(glob)]
        assert choose(options(res["configs"][f"{s}/{ds}/{m}"], glob, 10_000, 80.0)) is not None
    moe = res["configs"]["recursive/fashion_mnist/dsa-moe"]
    assert moe["grouped_train_images_per_s"][str(run_spec(p, "dsa-moe", "fashion_mnist").train.global_batch)] > 0
    rows = moe["eval"]
    assert [r["exit"] for r in rows] == list(range(1, model_spec(p, "dsa-moe", "fashion_mnist").config.steps + 1))
    assert all(r["latency_ms"] > 0 and r["images_per_s"] > 0 for r in rows)  # batch-1 latency per exit
    assert any(w.startswith("compile ") for w in res["skipped"])  # compiling needs 120 s left: listed, not lost
    fed = res["configs"]["recursive/fashion_mnist/sa-mlp"]  # the step fed by the real input path, beside random ones
    glob = str(run_spec(p, "sa-mlp", "fashion_mnist").train.global_batch)
    assert fed["loader_fed_images_per_s"][glob] > 0 and fed["input_images_per_s"][glob] > 0
    assert fed["input_path"]["augment_on"] == "host"

