"""The paper-smoke overlay at a reduced size, inside `make test`: two paper configurations (DSA-MoE on CIFAR-10,
the recurrent SparseFormer on ImageNet-100 at 160 px) through the stages, one step each under torchrun with two
processes (gloo, bf16 autocast, the full recipe), on synthetic data in the real formats. `make paper-smoke` runs
every configuration through `dvc repro`."""
import json
import os
import subprocess
import sys

import pytest
import yaml

from helpers import ROOT
from itervision.data.synthetic import cifar_dataset, imagenet_tree
from itervision.config.params import check_params
from itervision.config.scales import render_scale

pytestmark = pytest.mark.slow
PY = sys.executable


def reduced_overlay() -> dict:
    raw = render_scale("paper-smoke", ROOT)
    raw["recursive"].update(datasets=["cifar10"], main=["sa-mlp", "dsa-moe"], one_pass="", ablations=[],
                            ablation_datasets=[],
                            k_ablation=[], depth_ablation=[], embedding_ablation=[])
    raw["sparseformer"].update(datasets=["imagenet100"], ablation_datasets=["imagenet100"],
                               main=["sf-static-9", "sf-recurrent"], ablations=["sf-recurrent-nomem"],
                               static=["sf-static-9"], budget_models=["sf-static-9"], target_model="sf-static-9")
    raw["data"]["sources"] = {"cifar10": "synthetic/cifar10", "imagenet100": "synthetic/imagenet"}
    raw["train"]["ema"] = True  # the documents do not say; the paper scale keeps it off, the engine must run it
    check_params(raw)
    return raw


def run(cwd, *args, launcher=(PY,)):
    r = subprocess.run([*launcher, *[str(ROOT / a) if a.startswith("stages/") else a for a in args]], cwd=cwd,
                       capture_output=True, text=True, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, f"{args} failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


def test_two_paper_configurations_one_step_under_torchrun(tmp_path):
    raw = reduced_overlay()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    (tmp_path / "data/splits").mkdir(parents=True)
    (tmp_path / "data/splits/imagenet100.txt").write_text((ROOT / "data/splits/imagenet100.txt").read_text())
    cifar_dataset(tmp_path / "synthetic/cifar10", "cifar10", 20, 5)
    imagenet_tree(tmp_path / "synthetic/imagenet", [tmp_path / "data/splits/imagenet100.txt"])
    run(tmp_path, "stages/configure.py")
    for ds in ("cifar10", "imagenet100"):
        run(tmp_path, "stages/make_subset.py", "--dataset", ds)
    summary = json.loads((tmp_path / "data/prepared/imagenet100/summary.json").read_text())
    assert len(summary["bad_images"]) == 3 and summary["totals"]["holdout"] == 100  # the truncated JPEGs
    for study, ds, model in (("recursive", "cifar10", "dsa-moe"), ("sparseformer", "imagenet100", "sf-recurrent")):
        # the paper-smoke recipe takes 2 processes (run.gpus): the run starts its own torchrun group
        run(tmp_path, "stages/run.py", "--study", study, "--dataset", ds, "--model", model, "--seed", "0", "--quiet")
        out = tmp_path / "runs" / study / ds / model / "seed0"
        log = json.loads((out / "train_log.json").read_text())
        config = json.loads((out / "config.json").read_text())
        assert config["world_size"] == 2 and log["global_batch"] == 4 and log["steps_per_epoch"] == 1
        assert config["train"]["amp"] == "bf16" and config["train"]["mixup"] == 0.8 and config["train"]["ema"] is True
        assert config["train"]["randaugment"] == "rand-m9-mstd0.5-inc1" and config["train"]["repeated_aug"] == 3
        metrics = json.loads((out / "metrics.json").read_text())
        assert len(metrics["splits"]["test"]["top1_per_exit"]) == (16 if model == "dsa-moe" else 3)
    run(tmp_path, "stages/profile_model.py", "--study", "sparseformer", "--dataset", "imagenet100", "--model",
        "sf-recurrent")
    prof = json.loads((tmp_path / "runs/sparseformer/imagenet100/sf-recurrent/profile.json").read_text())
    assert prof["costs"]["gflops_per_exit"] == pytest.approx([0.199, 0.399, 0.715], rel=0.01)  # as published
