"""Training engine: determinism, kill-and-resume, NaN handling, torchrun on the CPU, paired data order."""
import os
import subprocess
import sys

import pytest
import torch

from helpers import ROOT, make_prepared, tiny_params
from itervision.data.loaders import SeededDraws, open_split
from itervision.engine.distributed import RepeatedAugmentationSampler
from itervision.engine.train import TrainingDiverged, train_run
from itervision.evaluation.exits import evaluate_run
from itervision.params import model_config, train_config

PY = sys.executable


def run_stage(cwd, script, *args, env=None, launcher=None):
    cmd = (launcher or [PY]) + [str(ROOT / "stages" / script), *args]
    return subprocess.run(cmd, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=600)


def weights(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def same_weights(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture
def workdir(tmp_path):
    make_prepared(tmp_path)
    return tmp_path


@pytest.mark.parametrize("model", ["dsa-moe", "sf-recurrent"])
def test_same_seed_gives_identical_metrics_and_another_seed_does_not(workdir, model):
    params = tiny_params(workdir)
    cfg, tcfg = model_config(params, model, "synth"), train_config(params, "synth")
    prepared = workdir / "data/prepared/synth"
    outs = []
    for i, seed in enumerate((3, 3, 4)):
        out = workdir / f"run{i}"
        log = train_run(model_name=model, model_cfg=cfg, train_cfg=tcfg, prepared=prepared, seed=seed, out_dir=out,
                        ckpt_dir=workdir / f"ck{i}", progress=False)
        m = evaluate_run(model_name=model, model_cfg=cfg, eval_cfg={"timing_repeats": 1, "latency_repeats": 1,
                                                                     "timing_batch": 4},
                         prepared=prepared, weights=out / "final_weights.pt", out_dir=out, seed=seed)
        outs.append((log, m, weights(out / "final_weights.pt")))
    (l0, m0, w0), (l1, m1, w1), (l2, m2, w2) = outs
    assert same_weights(w0, w1)
    assert m0["splits"] == m1["splits"]
    assert [r["loss"] for r in l0["log"]] == [r["loss"] for r in l1["log"]]
    assert not same_weights(w0, w2)


def test_killed_run_resumes_and_ends_like_an_uninterrupted_run(workdir):
    tiny_params(workdir, epochs=3)
    args = ["--study", "recursive", "--dataset", "synth", "--model", "dsa-moe", "--seed", "0", "--quiet"]
    steps_per_epoch = 64 // 8
    crashed = run_stage(workdir, "train.py", *args, env={"ITERVISION_FAULT": f"crash_at_step={steps_per_epoch + 3}"})
    assert crashed.returncode == 137
    run = workdir / "runs/recursive/synth/dsa-moe/seed0"
    ckpt = workdir / "checkpoints/recursive/synth/dsa-moe/seed0/last.pt"
    assert ckpt.exists() and not (run / "final_weights.pt").exists()
    assert torch.load(ckpt, weights_only=True)["epoch"] == 0  # the last complete epoch
    resumed = run_stage(workdir, "train.py", *args[:-1])
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming dsa-moe seed 0 after epoch 1" in resumed.stdout
    resumed_w = weights(run / "final_weights.pt")
    # uninterrupted, in a second copy
    other = workdir / "clean"
    make_prepared(other)
    tiny_params(other, epochs=3)
    clean = run_stage(other, "train.py", *args)
    assert clean.returncode == 0, clean.stderr
    assert same_weights(resumed_w, weights(other / "runs/recursive/synth/dsa-moe/seed0/final_weights.pt"))


def test_a_checkpoint_of_another_configuration_is_not_resumed(workdir):
    params = tiny_params(workdir, epochs=1)
    cfg, tcfg = model_config(params, "sa-mlp", "synth"), train_config(params, "synth")
    kw = dict(model_name="sa-mlp", model_cfg=cfg, prepared=workdir / "data/prepared/synth", seed=0,
              out_dir=workdir / "out", ckpt_dir=workdir / "ck", progress=False)
    train_run(train_cfg=tcfg, **kw)
    log = train_run(train_cfg={**tcfg, "epochs": 2}, **kw)
    assert [r["epoch"] for r in log["log"]] == [1, 2]  # started over, did not resume the 1-epoch run


def test_nan_loss_stops_with_one_line_and_keeps_the_last_good_checkpoint(workdir):
    tiny_params(workdir, epochs=3)
    r = run_stage(workdir, "train.py", "--study", "recursive", "--dataset", "synth", "--model", "sa-mlp", "--seed",
                  "0", "--quiet", env={"ITERVISION_FAULT": "nan_at_step=10"})
    assert r.returncode == 2
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "loss is nan at epoch 2, step 3 (global step 11)" in lines[0]
    assert "Traceback" not in r.stderr
    ckpt = workdir / "checkpoints/recursive/synth/sa-mlp/seed0/last.pt"
    assert torch.load(ckpt, weights_only=True)["epoch"] == 0
    assert not (workdir / "runs/recursive/synth/sa-mlp/seed0/final_weights.pt").exists()
    with pytest.raises(TrainingDiverged):
        raise TrainingDiverged("x")


def test_torchrun_two_cpu_processes(workdir):
    tiny_params(workdir, epochs=1)
    launcher = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    r = run_stage(workdir, "run.py", "--study", "sparseformer", "--dataset", "synth", "--model", "sf-recurrent",
                  "--seed", "0", "--quiet", launcher=launcher, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    import json

    out = workdir / "runs/sparseformer/synth/sf-recurrent/seed0"
    log = json.loads((out / "train_log.json").read_text())
    assert log["world_size"] == 2 and log["steps_per_epoch"] == 64 // 2 // 8
    assert (out / "metrics.json").exists() and (out / "predictions.npz").exists()


def test_sampler_order_is_set_by_seed_and_ranks_partition_the_draws():
    a = list(RepeatedAugmentationSampler(10, 1, 0, seed=1, repeats=1))
    b = list(RepeatedAugmentationSampler(10, 1, 0, seed=1, repeats=1))
    c = list(RepeatedAugmentationSampler(10, 1, 0, seed=2, repeats=1))
    assert a == b and a != c and sorted(a) == list(range(10))
    r0 = list(RepeatedAugmentationSampler(10, 2, 0, seed=1, repeats=3))
    r1 = list(RepeatedAugmentationSampler(10, 2, 1, seed=1, repeats=3))
    assert len(r0) == len(r1) == 5
    # copies of one image carry different copy numbers (index + copy * n), so they get different augmentations
    every = list(RepeatedAugmentationSampler(10, 1, 0, seed=1, repeats=3).__iter__())
    assert all(0 <= code < 30 for code in every)


def test_augmentation_is_a_function_of_seed_image_and_copy(workdir):
    from itervision.data.loaders import build_transform, dataset_description

    prepared = workdir / "data/prepared/synth"
    desc = dataset_description(prepared)
    ds = SeededDraws(open_split(prepared, "train", build_transform(True, 16, desc, {"randaugment": "rand-m9-n2"})))
    ds.epoch_seed = 7
    x1, _ = ds[5]
    torch.manual_seed(123)  # the model's randomness must not change the augmentation
    torch.rand(1000)
    x2, _ = ds[5]
    assert torch.equal(x1, x2)
    assert not torch.equal(x1, ds[5 + len(ds)][0])  # another copy of the same image
    ds.epoch_seed = 8
    assert not torch.equal(x1, ds[5][0])
