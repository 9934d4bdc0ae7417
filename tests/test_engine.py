"""Training engine: determinism, pairing, kill-and-resume (also mid-epoch), checkpoints that never outlive their
data or code, NaN handling, torchrun on the CPU, the encoder-only baseline."""
import json
import os
import subprocess
import sys

import pytest
import torch

from helpers import ROOT, prepare
from itervision.data.loaders import train_batches
from itervision.data.sampler import RepeatedAugmentationSampler
from itervision.engine.train import curve_steps, train_run
from itervision.evaluation.evaluate import evaluate_run
from itervision.layout import prepared_dir
from itervision.runs import RunRecord
from itervision.config.specs import read_model_spec, read_run_spec
from itervision.studies.common import run_overhead, training_speed

PY = sys.executable


def run_py(cwd, *args, launcher=None, env=None):
    cmd = (launcher or [PY]) + list(args)
    return subprocess.run(cmd, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=600)


def weights(path):
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


def same_weights(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def train_and_evaluate(model, seed, study):
    record = RunRecord(study, "fashion_mnist", model, seed)
    spec, run = read_model_spec("fashion_mnist", model), read_run_spec("fashion_mnist", model)
    log = train_run(record=record, spec=spec, train=run.train, prepared=prepared_dir("fashion_mnist"), progress=False)
    return (log, evaluate_run(record, spec, run, prepared_dir("fashion_mnist"), log["fingerprint"]),
            weights(record.path("weights.pt")))


@pytest.fixture
def repo(tmp_path, monkeypatch):
    prepare(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("model,study", [("dsa-moe", "recursive"), ("sf-recurrent", "sparseformer")])
def test_same_seed_gives_identical_results_and_another_seed_does_not(repo, model, study):
    l0, m0, w0 = train_and_evaluate(model, 3, study)
    torch.rand(1000)  # global generator state must not matter
    l1, m1, w1 = train_and_evaluate(model, 3, study)
    _, m2, w2 = train_and_evaluate(model, 4, study)
    assert same_weights(w0, w1) and not same_weights(w0, w2)
    assert m0["splits"] == m1["splits"]
    assert [r["loss"] for r in l0["log"]] == [r["loss"] for r in l1["log"]] and l0["curve"] == l1["curve"]


def test_curve_points_are_evenly_spaced_and_end_at_the_last_step():
    assert curve_steps(40, 4) == [10, 20, 30, 40]
    assert curve_steps(7, 3) == [2, 5, 7]
    assert curve_steps(40, 0) == []


def test_learning_curve_and_budget_are_recorded(repo):
    log, metrics, _ = train_and_evaluate("sa-mlp", 0, "recursive")
    # 200 synthetic training images less 4 x 10 calibration images, batches of 8, 2 epochs
    assert log["steps_per_epoch"] == 20 and log["images_seen"] == 2 * 20 * 8 and log["train_images"] == 160
    assert [c["images"] for c in log["curve"]] == [160, 320]
    assert all(0 <= c["test_top1"] <= 1 and 0 <= c["calib_top1"] <= 1 for c in log["curve"])
    assert log["startup_seconds"] is None or log["startup_seconds"] > 0
    assert 0 < metrics["evaluate_seconds"] < 600


def test_run_overhead_is_start_up_plus_evaluation_per_run_and_skips_runs_without_a_figure():
    runs = {("ds", "m", s): {"train": {"images_per_s": 100.0, "seconds": 10.0, "startup_seconds": st},
                             "metrics": {"evaluate_seconds": ev}}
            for s, st, ev in ((0, 2.0, 3.0), (1, 3.0, 4.0), (2, None, 5.0))}
    speed = training_speed(runs, "ds", "m", [0, 1, 2])
    assert run_overhead(speed) == {"startup_seconds": 2.5, "evaluate_seconds": 4.0, "overhead_seconds": 6.0}
    assert speed["overhead_seconds"]["n"] == 2 and speed["evaluate_seconds"]["n"] == 3


@pytest.mark.slow
def test_killed_run_resumes_mid_epoch_and_ends_like_an_uninterrupted_run(tmp_path):
    repos = []
    for name in ("killed", "clean"):
        prepare(tmp_path / name, curve_points=4)  # checkpoints at steps 10, 20, 30, 40 (20 steps an epoch)
        repos.append(tmp_path / name)
    killed, clean = repos
    script = str(ROOT / "tests" / "train_with_fault.py")
    crashed = run_py(killed, script, "dsa-moe", "0", "crash", "13")
    assert crashed.returncode == 137
    ckpt = killed / "checkpoints/recursive/fashion_mnist/dsa-moe/seed0/last.pt"
    assert torch.load(ckpt, weights_only=True)["step"] == 10  # mid-epoch: step 10 of 20
    assert not (killed / "runs/recursive/fashion_mnist/dsa-moe/seed0/weights.pt").exists()
    resumed = run_py(killed, script, "dsa-moe", "0", "crash", "-1")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming dsa-moe seed 0 at step 10 of 40" in resumed.stderr + resumed.stdout
    assert run_py(clean, script, "dsa-moe", "0", "crash", "-1").returncode == 0
    run = "runs/recursive/fashion_mnist/dsa-moe/seed0"
    assert same_weights(weights(killed / run / "weights.pt"), weights(clean / run / "weights.pt"))
    a, b = (json.loads((r / run / "train_log.json").read_text()) for r in (killed, clean))
    assert [r["loss"] for r in a["log"]] == [r["loss"] for r in b["log"]] and a["curve"] == b["curve"]


@pytest.mark.slow
def test_changed_training_data_retrains_instead_of_resuming(tmp_path):
    """Silent wrong result of the past: a checkpoint resumed after its data changed."""
    script = str(ROOT / "tests" / "train_with_fault.py")
    prepare(tmp_path, curve_points=4)
    assert run_py(tmp_path, script, "sa-mlp", "0", "crash", "25").returncode == 137
    ckpt = tmp_path / "checkpoints/recursive/fashion_mnist/sa-mlp/seed0/last.pt"
    assert ckpt.exists()
    (tmp_path / "source").rename(tmp_path / "old-source")
    prepare(tmp_path, per_class=(24, 5), curve_points=4)  # 24 images per class instead of 20
    out = run_py(tmp_path, script, "sa-mlp", "0", "crash", "-1")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "resuming" not in out.stdout + out.stderr
    log = json.loads((tmp_path / "runs/recursive/fashion_mnist/sa-mlp/seed0/train_log.json").read_text())
    assert log["train_images"] == 200 and log["steps_per_epoch"] == 25  # trained on the new data, from step 0
    fresh = tmp_path / "fresh"
    prepare(fresh, per_class=(24, 5), curve_points=4)
    assert run_py(fresh, script, "sa-mlp", "0", "crash", "-1").returncode == 0
    run = "runs/recursive/fashion_mnist/sa-mlp/seed0/weights.pt"
    assert same_weights(weights(tmp_path / run), weights(fresh / run))


@pytest.mark.slow
def test_a_completed_run_leaves_no_checkpoint(repo):
    out = run_py(repo, str(ROOT / "stages/run.py"), "--study", "recursive", "--dataset", "fashion_mnist", "--model",
                 "sa-mlp", "--seed", "0", "--quiet")
    assert out.returncode == 0, out.stderr[-2000:]
    assert not (repo / "checkpoints/recursive/fashion_mnist/sa-mlp/seed0").exists()
    run = repo / "runs/recursive/fashion_mnist/sa-mlp/seed0"
    assert {p.name for p in run.iterdir()} == {"config.json", "weights.pt", "train_log.json", "predictions.npz",
                                               "metrics.json"}
    config = json.loads((run / "config.json").read_text())
    assert config["config"]["attention"] == "dense" and config["train"]["global_batch"] == 8
    assert len(config["data"]["fingerprint"]) == 16 and len(config["fingerprint"]) == 16


@pytest.mark.slow
def test_nan_loss_stops_with_one_line_and_keeps_the_last_good_checkpoint(tmp_path):
    prepare(tmp_path, curve_points=4)
    r = run_py(tmp_path, str(ROOT / "tests" / "train_with_fault.py"), "sa-mlp", "0", "nan", "22")
    assert r.returncode == 2
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "loss is nan at epoch 2, step 3 (global step 23)" in lines[0]
    assert "checkpoints/recursive/fashion_mnist/sa-mlp/seed0/last.pt (step 20)" in lines[0]
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "runs/recursive/fashion_mnist/sa-mlp/seed0/weights.pt").exists()


@pytest.mark.slow  # torchrun
def test_one_and_two_processes_train_the_same_recipe(repo, tmp_path):
    """The global batch rule: a recipe of 2 processes (params run.gpus 2) starts its own torchrun group (gloo) from
    a plain `python stages/run.py`, and each process takes half of train.global_batch, so the images per
    optimiser step, the steps and the learning rate of every step equal those of one process."""
    run = ["stages/run.py", "--study", "sparseformer", "--dataset", "fashion_mnist", "--model", "sf-recurrent",
           "--seed", "0", "--quiet"]
    two_root = tmp_path / "two"
    prepare(two_root, run={"gpus": 2})
    assert json.loads((two_root / "configs/resolved/fashion_mnist/sf-recurrent/run.json").read_text())["world"] == 2
    r = run_py(two_root, *[str(ROOT / run[0])] + run[1:], env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    out = two_root / "runs/sparseformer/fashion_mnist/sf-recurrent/seed0"
    two = json.loads((out / "train_log.json").read_text())
    assert (out / "metrics.json").exists() and (out / "predictions.npz").exists()
    r = run_py(repo, *[str(ROOT / run[0])] + run[1:])
    assert r.returncode == 0, r.stderr[-3000:]
    one = json.loads((repo / "runs/sparseformer/fashion_mnist/sf-recurrent/seed0/train_log.json").read_text())
    worlds = [json.loads((root / "runs/sparseformer/fashion_mnist/sf-recurrent/seed0/config.json").read_text())[
        "world_size"] for root in (repo, two_root)]
    assert worlds == [1, 2]
    assert one["global_batch"] == two["global_batch"] == 8
    assert (one["per_process_batch"], two["per_process_batch"]) == (8, 4)
    assert one["steps_per_epoch"] == two["steps_per_epoch"] == 160 // 8 and one["images_seen"] == two["images_seen"]
    assert [r["lr"] for r in one["log"]] == [r["lr"] for r in two["log"]]
    assert [r["images"] for r in one["log"]] == [r["images"] for r in two["log"]] == [160, 160]


@pytest.mark.slow  # torchrun
def test_a_compiled_step_under_two_processes_trains_like_the_eager_one(tmp_path):
    """train.compile (the paper scale's reduce-overhead: torch.compile with fullgraph, compiled before DDP wraps it,
    CUDA-graph step marks) through stages/run.py under torchrun (gloo): the losses of every epoch and exit equal
    the eager run's to float rounding (inductor fuses differently), and the run records how it was compiled."""
    logs = {}
    for mode in ("none", "reduce-overhead"):
        root = tmp_path / mode
        prepare(root, run={"gpus": 2}, compile=mode, epochs=1, steps_per_epoch=4, curve_points=0)  # 4 steps
        cache = root / "inductor"  # where inductor writes the code it generates: proof that it compiled
        env = {"OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(cache)}
        r = run_py(root, str(ROOT / "stages/run.py"), "--study", "recursive", "--dataset", "fashion_mnist", "--model",
                   "dsa-moe", "--seed", "0", "--quiet", env=env,
                   launcher=[PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"])  # by hand
        assert r.returncode == 0, r.stderr[-3000:]
        assert (cache.exists() and any(cache.rglob("*.py"))) == (mode != "none"), mode
        out = root / "runs/recursive/fashion_mnist/dsa-moe/seed0"
        assert json.loads((out / "config.json").read_text())["train"]["compile"] == mode
        logs[mode] = json.loads((out / "train_log.json").read_text())
        assert json.loads((out / "config.json").read_text())["world_size"] == 2
    eager, compiled = logs["none"], logs["reduce-overhead"]
    assert len(compiled["log"]) == len(eager["log"]) == 1
    keys = [k for k in eager["log"][0] if k.startswith(("loss", "aux_loss"))]
    assert len(keys) >= 4  # the total, the auxiliary loss and one per exit
    for a, b in zip(eager["log"], compiled["log"]):
        assert [b[k] for k in keys] == pytest.approx([a[k] for k in keys], rel=1e-5)


def test_a_placement_the_global_batch_does_not_divide_is_one_line(tmp_path, monkeypatch):
    from helpers import tiny_params
    from itervision.config.params import load_params
    from itervision.errors import UserError

    tiny_params(tmp_path, run={"placement": {"fashion_mnist/sa-mlp": 3}})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="train.global_batch 8 is not divisible by the 3 processes of this run"):
        load_params()
    tiny_params(tmp_path, run={"placement": {"fashion_mnist/no-such-model": 2}})
    with pytest.raises(UserError, match="run.placement names fashion_mnist/no-such-model, which is no"):
        load_params()


@pytest.mark.slow  # torchrun
def test_a_launcher_that_starts_another_world_than_the_recipe_is_one_line(repo):
    """The number of processes is part of the recipe (run.json's world): torchrun with 2 processes on a recipe of
    1 is refused before training, so no run is recorded with a recipe it did not follow."""
    r = run_py(repo, str(ROOT / "stages/run.py"), "--study", "recursive", "--dataset", "fashion_mnist", "--model",
               "sa-mlp", "--seed", "0", "--quiet", launcher=[PY, "-m", "torch.distributed.run", "--standalone",
                                                             "--nproc_per_node=2"], env={"OMP_NUM_THREADS": "1"})
    assert r.returncode != 0
    assert "its recipe trains on 1 processes (params run.gpus / run.placement) but the launcher started 2" in r.stderr
    assert not (repo / "runs/recursive/fashion_mnist/sa-mlp/seed0").exists()


def test_micro_batches_accumulate_to_the_same_step(repo):
    """micro_batch splits a process's share into accumulation steps: one optimiser step over 2 micro-batches of 4
    equals one over the whole 8 (a model without BatchNorm and without drop path: nothing else sees the split)."""
    import dataclasses

    from itervision.engine.train import set_up, train_step

    spec = read_model_spec("fashion_mnist", "sf-static-9")
    spec = dataclasses.replace(spec, config=dataclasses.replace(spec.config, drop_path=0.0))
    params = {}
    for micro in (None, 4):
        train = dataclasses.replace(read_run_spec("fashion_mnist", "sf-static-9").train, micro_batch=micro)
        record = RunRecord("sparseformer", "fashion_mnist", "sf-static-9", 0)
        s = set_up(record, spec, train, prepared_dir("fashion_mnist"))
        assert (s.batching.accumulation, s.batching.micro) == ((1, 8) if micro is None else (2, 4))
        _, img, target = next(iter(s.batches.epoch(0)))
        logged = train_step(s, img, target, 0, 0, 0)
        params[micro] = ([p.grad.clone() for p in s.model.parameters()], logged)
    for a, b in zip(params[None][0], params[4][0]):  # the accumulated gradient the optimiser stepped with
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(params[None][1], params[4][1], rtol=1e-5, atol=1e-6)


def test_the_recipe_reaches_the_engine_parsed_once(repo, monkeypatch):
    """The engine takes the typed recipe (never a raw dict) and derives the per-process batch once per run."""
    import dataclasses

    from itervision.config.run_configs import TrainConfig
    from itervision.engine.train import set_up

    calls = []
    original = TrainConfig.batching
    monkeypatch.setattr(TrainConfig, "batching", lambda self, world: calls.append(world) or original(self, world))
    spec, run = read_model_spec("fashion_mnist", "sa-mlp"), read_run_spec("fashion_mnist", "sa-mlp")
    s = set_up(RunRecord("recursive", "fashion_mnist", "sa-mlp", 0), spec, run.train, prepared_dir("fashion_mnist"))
    assert calls == [1] and isinstance(s.train, TrainConfig) and s.batching.per_process == run.train.global_batch
    with pytest.raises(AttributeError):  # a raw dict is refused where the typed recipe is expected
        set_up(RunRecord("recursive", "fashion_mnist", "sa-mlp", 0), spec, dataclasses.asdict(run.train),
               prepared_dir("fashion_mnist"))


def test_encoder_only_baseline_trains_and_evaluates(repo):
    log, m, w = train_and_evaluate("encoder-only", 0, "recursive")
    assert len(m["splits"]["test"]["top1_per_exit"]) == 1 and "traces" not in m
    assert not any(k.startswith("blocks") for k in w)  # no recursion: encoder, norm and head only
    assert log["final_loss"] < log["log"][0]["loss"] * 1.5


def test_sampler_order_is_set_by_seed_and_ranks_partition_the_draws():
    a = list(RepeatedAugmentationSampler(10, 1, 0, seed=1, repeats=1))
    b = list(RepeatedAugmentationSampler(10, 1, 0, seed=1, repeats=1))
    c = list(RepeatedAugmentationSampler(10, 1, 0, seed=2, repeats=1))
    assert a == b and a != c and sorted(a) == list(range(10))
    r0 = list(RepeatedAugmentationSampler(10, 2, 0, seed=1, repeats=3))
    r1 = list(RepeatedAugmentationSampler(10, 2, 1, seed=1, repeats=3))
    assert len(r0) == len(r1) == 5
    every = list(RepeatedAugmentationSampler(10, 1, 0, seed=1, repeats=3))
    assert all(0 <= code < 30 for code in every)


def test_batches_are_a_pure_function_of_seed_epoch_and_batch(repo):
    import dataclasses

    train = dataclasses.replace(read_run_spec("fashion_mnist", "sa-mlp").train, crop_scale=[0.5, 1.0], crop_pad=2,
                                hflip=0.5, random_erasing=0.5)
    first = train_batches(prepared_dir("fashion_mnist"), 16, train, train.batching(1), seed=5)
    second = train_batches(prepared_dir("fashion_mnist"), 16, train, train.batching(1), seed=5)  # another variant, same seed
    torch.manual_seed(99)
    a = list(first.epoch(1))
    torch.rand(10_000)  # the model's randomness consumes the global generator in between
    b = list(second.epoch(1))
    assert len(a) == len(b) == 20
    assert all(x[0] == y[0] and torch.equal(x[1], y[1]) and torch.equal(x[2], y[2]) for x, y in zip(a, b))
    resumed = list(second.epoch(1, start=7))  # a resumed run starts at a batch and sees the same images
    assert resumed[0][0] == 7 and torch.equal(resumed[0][1], a[7][1])
    other_epoch, other_seed = next(iter(first.epoch(2))), next(iter(train_batches(
        prepared_dir("fashion_mnist"), 16, train, train.batching(1), seed=6).epoch(1)))
    assert not torch.equal(other_epoch[1], a[0][1]) and not torch.equal(other_seed[1], a[0][1])
