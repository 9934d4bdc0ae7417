"""End to end at the tiny scale, in temporary copies of the repository: `dvc repro`, a no-op repro, a timing-only
change, adding a seed with `dvc exp run -S`, `dvc metrics diff` and the gate, `dvc plots show`, a push and pull
through an S3-compatible server, and `dvc repro` killed with kill -9 in the middle of a run stage."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from helpers import BIN, make_repo, sh

pytestmark = pytest.mark.slow


@pytest.fixture
def repo(built_repo, tmp_path):
    """A copy of the session's tiny repository with its results: the built one is shared by every test (and by
    both pytest-xdist workers), so no test changes it in place."""
    import shutil

    dst = tmp_path / "repo"
    shutil.copytree(built_repo, dst, symlinks=True)
    return dst


def test_repro_writes_every_table_figure_and_metric(repo):
    for table in ("recursive/tables/table1_accuracy.md", "recursive/tables/table2_efficiency.md",
                  "recursive/tables/table3_k_ablation.md", "recursive/tables/table4_depth_ablation.md",
                  "recursive/tables/table4b_per_step.md", "recursive/tables/table5_embedding_ablation.md",
                  "recursive/tables/table6_traces.md", "sparseformer/tables/table1_exits_fashion_mnist.md",
                  "sparseformer/tables/table2_early_exit_fashion_mnist.md", "sparseformer/tables/table3_claims.md",
                  "sparseformer/tables/table4_wallclock_fashion_mnist.md", "recursive/tables/table7_early_exit.md",
                  "sparseformer/tables/table5_early_exit_fashion_mnist.md", "claims.md", "claims.csv"):
        assert (repo / "metrics" / table).stat().st_size > 100, table
    for fig in ("recursive/accuracy_per_step.png", "recursive/expert_utilisation.png", "recursive/learning_curves.png",
                "sparseformer/frontier_gflops_fashion_mnist.png", "sparseformer/rounds_used_fashion_mnist.png",
                "sparseformer/early_exit_fashion_mnist.png", "recursive/ece_per_step.png",
                "sparseformer/learning_curves_fashion_mnist.png"):
        assert (repo / "plots" / fig).stat().st_size > 1000, fig
    summary = json.loads((repo / "metrics/recursive.json").read_text())
    assert 0 <= summary["fashion_mnist"]["dsa-moe"]["top1"]["mean"] <= 1
    assert summary["fashion_mnist"]["dsa-moe"]["top1"]["n"] == 2
    assert "images_per_s" not in json.dumps(summary)  # timing lives in its own file
    assert "images_per_s" in (repo / "metrics/recursive_timing.json").read_text()
    table1 = (repo / "metrics/recursive/tables/table1_accuracy.md").read_text()
    assert "encoder-only" in table1 and "Training budget: every run: 160 training images seen" in table1
    # the k ablation compares k = 2 with the tiny scale's k = 3, not k with itself
    k_table = (repo / "metrics/recursive/tables/table3_k_ablation.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in k_table[1:]] == ["2", "3"]
    assert "up to date" in sh("dvc status", repo)
    assert "Running stage" not in sh("dvc repro", repo)


def test_python_bytecode_beside_the_sources_changes_no_dependency(repo):
    """A fresh clone has no __pycache__, a used checkout has one: neither may make a stage look changed."""
    sh(f"{sys.executable} -m compileall -q src stages", repo)
    assert list((repo / "src/itervision/models").glob("__pycache__/*.pyc"))
    assert "up to date" in sh("dvc status", repo)


def test_plots_render_one_chart_per_file_with_bands(repo):
    sh("dvc plots show", repo)
    html = (repo / "dvc_plots/index.html").read_text()
    assert html.count('"y2"') >= 3 and "datum.kind === 'curve'" in html  # bands from the custom templates
    frontier = (repo / "plots/sparseformer/dvc/frontier/frontier_gflops_fashion_mnist.csv").read_text().splitlines()
    assert frontier[0] == "model,gflops,top1,low,high,kind"
    rows = [r.split(",") for r in frontier[1:]]
    assert {r[0] for r in rows if r[5] == "point"} == {"sf-static-9", "sf-static-25"}
    assert all(0 <= float(r[3]) <= float(r[2]) <= float(r[4]) <= 100 for r in rows)  # bands clipped to 0-100
    per_step = (repo / "plots/recursive/dvc/accuracy_per_step.csv").read_text()
    assert per_step.startswith("model,step,top1") and "dsa-moe-soft" in per_step and "sa-mlp" in per_step


def test_a_timing_only_change_retrains_nothing(repo):
    out = sh("dvc exp run -S profile.latency_repeats=2", repo)
    ran = [s.split(":")[-1] for s in re.findall(r"Running stage '([^']+)'", out)]
    assert ran and all(s.startswith(("profile_", "aggregate_", "report_", "configure", "claims", "timing_"))
                       for s in ran), ran
    assert not any(s.startswith("run_") for s in ran)


def test_a_top_k_change_retrains_only_the_models_that_read_it(repo):
    out = sh("dvc exp run -S architectures.recursive.topk=2", repo)
    ran = {s for s in re.findall(r"Running stage '[^']*:(run_[^']+)'", out)}
    retrained = {s.split("@")[1].rsplit("-", 1)[0].replace("fashion_mnist-", "") for s in ran}
    # the tiny scale's dsa-moe (k 3) and the ablations that inherit k change; sa-mlp (dense), the encoder-only
    # baseline and dsa-moe-k2 (its own k) do not
    assert retrained == {"dsa-moe", "dsa-moe-steps2", "dsa-moe-soft"}, ran


def test_adding_a_seed_runs_only_the_new_runs_and_the_gate_reads_the_diff(repo, tmp_path):
    out = sh("dvc exp run -S 'ablation_seeds=[0,1]'", repo)
    ran = re.findall(r"Running stage '([^']+:run_[^']+)'", out)
    assert sorted(ran) == sorted([f"pipelines/recursive-ablations/dvc.yaml:run_recursive_ablation@fashion_mnist-{m}-1"
                                  for m in ("dsa-moe-k2", "dsa-moe-steps2", "dsa-moe-soft")]
                                 + ["pipelines/sparseformer-ablations/dvc.yaml:run_sparseformer_ablation@"
                                    "fashion_mnist-sf-recurrent-nomem-1"])
    diff = json.loads(sh("dvc metrics diff HEAD --all --json", repo).strip().splitlines()[-1])
    assert any(k.endswith("top1.n") for keys in diff.values() for k in keys)
    (tmp_path / "diff.json").write_text(json.dumps(diff))
    gate = subprocess.run([sys.executable, "stages/check_regressions.py", "--diff-json", str(tmp_path / "diff.json")],
                          cwd=repo, capture_output=True, text=True)
    assert gate.returncode in (0, 1) and "accuracy metrics compared" in gate.stdout
    shown = sh("dvc exp show --md --only-changed --drop 'Created|State|Executor'", repo)
    # a readable width: claims.json's per-document, per-fidelity verdict counts add columns when verdicts move
    assert "ablation_seeds" in shown and max(len(line) for line in shown.splitlines()) < 5000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_push_and_pull_through_an_s3_compatible_server(repo, tmp_path):
    """A fresh clone pulls every output from the remote: `dvc status` is clean and `dvc repro` trains nothing."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    try:
        import boto3

        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", **{
            "aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}
        ).create_bucket(Bucket="itervision")
        remote = (f"dvc remote add -f -d store s3://itervision/cache && "
                  f"dvc remote modify store endpointurl http://127.0.0.1:{port}")
        sh(remote, repo)
        sh("git add .dvc/config && git -c user.email=t@t -c user.name=t commit -qm remote", repo)
        pushed = sh("dvc push", repo, env=env)
        assert re.search(r"\d+ files? pushed", pushed), pushed
        clone = tmp_path / "clone"
        sh(f"git clone -q {repo} {clone}", tmp_path)
        shutil.copytree(repo / "synthetic", clone / "synthetic")  # source data is not a DVC output
        sh("dvc pull", clone, env=env)
        assert (clone / "runs/recursive/fashion_mnist/dsa-moe/seed0/weights.pt").exists()
        assert "up to date" in sh("dvc status", clone)
        assert "Running stage" not in sh("dvc repro", clone, env=env)
    finally:
        server.stop()


def test_kill_minus_nine_during_a_run_stage_then_repro_completes_with_the_same_results(repo, tmp_path):
    fresh = make_repo(tmp_path / "killed")
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1"}
    # dvc itself is the child (no shell in between), so the wait below reaps it and its lock is seen as free
    proc = subprocess.Popen([str(BIN / "dvc"), "repro", "aggregate_recursive"], cwd=fresh, env=env,
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, killed = time.time() + 600, False
    while time.time() < deadline:  # kill once a run stage is training (its checkpoint folder exists)
        if any((fresh / "checkpoints").rglob("last.pt")):
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            break
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.wait()
    assert killed, "the pipeline ended before a run stage could be killed"
    out = sh("dvc repro aggregate_recursive", fresh)
    assert "Running stage 'aggregate_recursive'" in out
    assert "up to date" in sh("dvc status aggregate_recursive", fresh)
    ours = json.loads((fresh / "metrics/recursive.json").read_text())
    theirs = json.loads((repo / "metrics/recursive.json").read_text())  # the uninterrupted pipeline's
    assert ours == theirs  # same machine, same seeds: bit-identical
    leftovers = [p for p in (fresh / "runs").rglob("*.tmp")] + [p for p in fresh.rglob(".*.tmp") if "runs" in str(p)]
    assert not leftovers
