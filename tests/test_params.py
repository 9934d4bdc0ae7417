"""params.yaml is checked once, at load time, with one line naming the key, the value and what is allowed."""
import copy
import subprocess
import sys
import time

import pytest
import yaml

from helpers import ROOT
from itervision.errors import UserError
from itervision.config.params import check_params, load_params, model_config, train_config
from itervision.config.matrix import resolved_configs
from itervision.config.scales import render_scale

CPU = yaml.safe_load((ROOT / "configs/scales/cpu.yaml").read_text())


def with_change(path: str, value, base=None) -> dict:
    """A copy of the CPU-scale params with one dotted key set (or removed with value=KeyError)."""
    raw = copy.deepcopy(base or CPU)
    node, keys = raw, path.split(".")
    for k in keys[:-1]:
        node = node[k]
    if value is KeyError:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return raw


def error_of(raw) -> str:
    with pytest.raises(UserError) as err:
        check_params(raw)
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_the_shipped_scales_are_valid():
    for scale in ("cpu", "tiny", "paper", "paper-smoke"):
        check_params(render_scale(scale, ROOT))


@pytest.mark.parametrize("path,value,expected", [
    ("train.epochs", 0, "'train.epochs' = 0 is out of range: must be >= 1"),
    ("train.epochs", -3, "'train.epochs' = -3 is out of range: must be >= 1"),
    ("train.epochs", 1.5, "'train.epochs' must be an integer, got 1.5"),
    ("train.lr", "0.001x", "'train.lr' must be a number, got '0.001x'"),
    ("train.lr", "4e-3", "'train.lr' must be a number, got '4e-3' (YAML reads 4e-3 as text: write 4.0e-3)"),
    ("train.lr", 0.0, "'train.lr' = 0.0 is out of range: must be > 0"),
    ("train.global_batch", "256", "'train.global_batch' must be an integer, got '256'"),
    ("train.threads", 0, "'train.threads' = 0 is out of range: must be in [1, 512]"),
    ("train.compile", "max", "'train.compile' = 'max' is out of range: must be one of 'none', 'default'"),
    ("train.micro_batch", 512, "micro_batch 512 exceeds global_batch 256"),
    ("train.crop_scale", "big", "'train.crop_scale' must be a list of numbers, got 'big'"),
    ("train.crop_scale", [0.9, 0.5], "'train.crop_scale' = [0.9, 0.5] is out of range: must be [low, high]"),
    ("train.hflip", 1.5, "'train.hflip' = 1.5 is out of range: must be in [0, 1]"),
    ("train.amp", "fp8", "'train.amp' = 'fp8' is out of range: must be one of 'none', 'bf16', 'fp16'"),
    ("train.randaugment", "rand-xyz", "'train.randaugment' = 'rand-xyz' is out of range: must be '' (off) or"),
    ("train.learning_rate", 1.0, "unknown key 'train.learning_rate'"),
    ("evaluate.batchsize", 3, "unknown key 'evaluate.batchsize'"),
    ("profile.timing_repeat", 3, "unknown key 'profile.timing_repeat'"),
    ("subset.sed", 3, "unknown key 'subset.sed'"),
    ("report.regression_drop", 3, "unknown key 'report.regression_drop'"),
    ("train", [1, 2], "params 'train' must be a mapping of keys, got list [1, 2]"),
    ("subset.torchvision.fashion_mnist.calib_per_class", -1, "calib_per_class' = -1 is out of range"),
    ("architectures.recursive.dim", -16, "'architectures.recursive.dim' = -16 is out of range: must be >= 1"),
    ("architectures.recursive.steps", 0, "'architectures.recursive.steps' = 0 is out of range: must be >= 1"),
    ("architectures.recursive.topk", 0, "'architectures.recursive.topk' = 0 is out of range: must be >= 1"),
    ("architectures.recursive.dim", KeyError, "'models.encoder-only (on fashion_mnist).dim' is missing; add it to "
                                              "architectures.recursive or models.encoder-only"),
    ("architectures.recursive.heads", KeyError, "'models.sa-mlp (on fashion_mnist).heads' is missing"),
    ("architectures.recursive.toppk", 3, "unknown key 'architectures.recursive.toppk'"),
    ("architectures.sparseformer.rounds", [9, 10],
     "rounds' = [9, 10] is out of range: must be non-empty, each a perfect"),
    ("models.sa-mlp.dim", 0.5, "'models.sa-mlp (on fashion_mnist).dim' must be an integer, got 0.5"),
    ("models.sa-mlp.num_classes", 3, "num_classes' is set by the dataset"),
    ("models.dsa-moe.arch", "nope", "model 'dsa-moe' names arch 'nope'"),
    ("seeds", 5, "'seeds' must be a non-empty list of integers, got 5"),
    ("seeds", [0, 0, 1, 2, 3], "'seeds' repeats seed 0"),
    ("ablation_seeds", [1, 2], "must be a prefix of seeds"),
    ("recursive.main", ["sa-mlp", "dsa-moe", "dsa-moe-steps1", "nope"], "unknown model 'nope'"),
    ("recursive.main", ["sa-mlp", "dsa-moe"], "recursive.one_pass 'dsa-moe-steps1' must be one of recursive.main"),
    ("recursive.baseline", "dsa-moe-k2", "recursive.baseline 'dsa-moe-k2' must be one of recursive.main"),
    ("recursive.k_ablation", ["dsa-moe-k2", "dsa-moe-soft"], "must include the reference model 'dsa-moe'"),
    ("sparseformer.target_model", "sf-recurrent", "target_model 'sf-recurrent' is not in sparseformer.static"),
    ("sparseformer.budget_models", ["sf-static-9", "sf-nope"], "budget_models names 'sf-nope'"),
    ("sparseformer.static", ["sf-static-9", "sf-static-16", "sf-static-25", "sf-recurrent"],
     "names 'sf-recurrent', which has several rounds"),
    ("recursive.train", {"epoch": 3}, "unknown key 'recursive.train.epoch'"),
    ("data.sources", {"fashion_mnist": "/x", "mnist": "/y"}, "names 'mnist' without an entry under subset.torchvision"),
    ("data.sources", {"../../escaped": "/x"}, "'data.sources' = {'../../escaped': '/x'} is out of range: must be a "
                                              "non-empty mapping of dataset names"),
    ("models.sa-mlp.moe_kernel", "fast", "'models.sa-mlp (on fashion_mnist).moe_kernel' = 'fast' is out of range"),
    ("architectures.recursive.topk", None,
     "'models.dsa-moe (on fashion_mnist).topk' is null (needed with attention: dsa)"),
    ("trian", {}, "unknown params group 'trian'"),
    ("evaluate", KeyError, "params group 'evaluate' is missing"),
])
def test_each_bad_value_is_one_line_naming_the_key(path, value, expected):
    assert expected in error_of(with_change(path, value))


@pytest.mark.serial  # it measures wall-clock: alone on the machine (make test runs it after the parallel lane)
def test_a_typo_fails_in_under_a_second(tmp_path):
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(with_change("evaluate.batchsize", 3)))
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, str(ROOT / "stages/configure.py"), "--params", str(bad)], cwd=tmp_path,
                       capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    assert r.returncode == 2 and r.stderr.strip() == (
        "error: unknown key 'evaluate.batchsize'; valid keys: batch_size, trace_images")
    assert elapsed < 3.0  # interpreter start included; the check itself takes ~0.15 s (measured)
    t0 = time.perf_counter()
    with pytest.raises(UserError):
        check_params(with_change("evaluate.batchsize", 3))
    assert time.perf_counter() - t0 < 1.0


def test_keys_that_cannot_matter_to_a_model_never_reach_its_config():
    p = check_params(CPU)
    sa, dsa = model_config(p, "sa-mlp", "fashion_mnist"), model_config(p, "dsa-moe", "fashion_mnist")
    assert sa["topk"] is None and sa["experts"] is None and dsa["mlp_ratio"] is None
    changed = check_params(with_change("architectures.recursive.topk", 5))
    before, after = resolved_configs(p), resolved_configs(changed)
    differs = sorted(m for (ds, m) in before if before[(ds, m)]["model.json"] != after[(ds, m)]["model.json"])
    # dense models and the models with their own k are untouched; the encoder-only baseline reads no attention key
    assert differs == ["dsa-moe", "dsa-moe-soft", "dsa-moe-steps1", "dsa-moe-steps4"]


def test_study_train_keys_and_by_dataset_layer_on_the_train_group():
    raw = with_change("sparseformer.train", {"steps_per_epoch": 7})
    raw["train"]["by_dataset"] = {"fashion_mnist": {"lr": 1.0e-3}}
    p = check_params(raw)
    sf, rec = train_config(p, "fashion_mnist", "sparseformer"), train_config(p, "fashion_mnist", "recursive")
    assert sf.steps_per_epoch == 7 and rec.steps_per_epoch == CPU["train"]["steps_per_epoch"]
    assert sf.lr == rec.lr == 1.0e-3


def test_load_params_names_a_missing_or_broken_file(tmp_path):
    with pytest.raises(UserError, match="params file .* not found"):
        load_params(tmp_path / "nope.yaml")
    (tmp_path / "p.yaml").write_text("train: [unclosed\n")
    with pytest.raises(UserError, match="not valid YAML at line 2"):
        load_params(tmp_path / "p.yaml")
    (tmp_path / "p.yaml").write_text("- just a list\n")
    with pytest.raises(UserError, match="must be a mapping of groups"):
        load_params(tmp_path / "p.yaml")
