"""End to end: `dvc repro` of the whole pipeline at the tiny scale in a temporary copy of the repository,
then `dvc status`, a no-op repro, adding a seed with `dvc exp run -S` (only the new runs run),
`dvc metrics diff` and the regression gate on its output."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

fashion = ROOT / "data/raw/FashionMNIST/raw/train-images-idx3-ubyte"
debian = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (fashion.exists() or debian.exists()),
                                 reason="Fashion-MNIST not installed (apt-get install -y dataset-fashion-mnist)")]


def sh(cmd, cwd, timeout=900):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1"}
    r = subprocess.run(cmd, cwd=cwd, shell=True, capture_output=True, text=True, timeout=timeout, env=env)
    assert r.returncode == 0, f"{cmd} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout + r.stderr


def copy_repo(dst: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        src = ROOT / f
        if src.is_file() and not f.startswith(("metrics/", "plots/")) and f != "dvc.lock":
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / f)
    if fashion.exists():  # reuse the staged idx files
        shutil.copytree(fashion.parent, dst / "data/raw/FashionMNIST/raw")


def test_dvc_repro_tiny_scale(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    copy_repo(repo)
    sh("git init -q && git add -A && git -c user.email=t@t -c user.name=t commit -qm init", repo)
    sh(f"{sys.executable} stages/set_scale.py tiny && git add params.yaml && "
       "git -c user.email=t@t -c user.name=t commit -qm tiny", repo)
    out = sh("dvc repro", repo)
    assert "Running stage 'report_sparseformer'" in out
    for table in ("recursive/tables/table1_accuracy.md", "recursive/tables/table2_efficiency.md",
                  "recursive/tables/table3_k_ablation.md", "recursive/tables/table4_depth_ablation.md",
                  "recursive/tables/table4b_per_step.md", "recursive/tables/table5_embedding_ablation.md",
                  "recursive/tables/table6_traces.md", "sparseformer/tables/table1_exits_fashion_mnist.md",
                  "sparseformer/tables/table2_early_exit_fashion_mnist.md", "sparseformer/tables/table3_claims.md",
                  "sparseformer/tables/table4_wallclock_fashion_mnist.md"):
        assert (repo / "metrics" / table).stat().st_size > 100, table
    for fig in ("recursive/accuracy_per_step.png", "recursive/expert_utilisation.png",
                "sparseformer/frontier_gflops_fashion_mnist.png", "sparseformer/rounds_used_fashion_mnist.png"):
        assert (repo / "plots" / fig).exists(), fig
    summary = json.loads((repo / "metrics/recursive.json").read_text())
    assert 0 <= summary["fashion_mnist"]["dsa-moe"]["top1"]["mean"] <= 1
    assert summary["fashion_mnist"]["dsa-moe"]["top1"]["n"] == 2
    assert "up to date" in sh("dvc status", repo)
    sh("dvc plots show", repo)
    assert (repo / "dvc_plots/index.html").exists()
    assert "Running stage" not in sh("dvc repro", repo)

    sh("git add -A && git -c user.email=t@t -c user.name=t commit -qm results", repo)
    shown = sh("dvc metrics show", repo)
    assert "fashion_mnist.dsa-moe.top1.mean" in shown
    # adding a seed runs only the new (model, seed) pairs, then re-aggregates
    out = sh("dvc exp run -S 'ablation_seeds=[0,1]'", repo)
    ran = re.findall(r"Running stage '(run_[^']+)'", out)
    assert sorted(ran) == sorted([f"run_recursive_ablation@fashion_mnist-{m}-1" for m in
                                  ("dsa-moe-k2", "dsa-moe-steps2", "dsa-moe-soft")]
                                 + ["run_sparseformer_ablation@fashion_mnist-sf-recurrent-nomem-1"])
    diff = sh("dvc metrics diff HEAD --json", repo)
    data = json.loads(diff[diff.index("{"):])
    assert any(k.endswith("top1.n") for keys in data.values() for k in keys)
    (repo / "diff.json").write_text(json.dumps(data))
    gate = subprocess.run([sys.executable, "stages/check_regressions.py", "--diff-json", "diff.json"], cwd=repo,
                          capture_output=True, text=True)
    assert gate.returncode in (0, 1) and "accuracy metrics checked" in gate.stdout
