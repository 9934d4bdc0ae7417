"""The sharded ImageNet data path and the device augmentation (data/shards.py, data/device_augment.py): shards
round-trip, timm's RandAugment policy and magnitudes, every op's pixels against timm's PIL op, the distribution of
whole RandAugment outputs and of the random-resized crop against timm / torchvision, and batches that are a
function of (seed, epoch, batch) alone: the same after a resume and with any number of loader workers."""
from __future__ import annotations

import dataclasses
import io
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).parent))
from test_data import SYNSETS, make_tree  # noqa: E402

from itervision.data import device_augment as da  # noqa: E402
from itervision.data.loaders import describe_prepared, eval_batches, train_batches  # noqa: E402
from itervision.data.shards import ShardIndex  # noqa: E402
from itervision.data.subset import subset_imagenet  # noqa: E402

RA = "rand-m9-mstd0.5-inc1"
HP = {"translate_const": 21, "img_mean": (124, 116, 104), "interpolation": "bicubic"}


def photo(seed: int, h: int = 48, w: int = 40) -> np.ndarray:
    """A smooth image with edges and noise (uint8 HWC): something between a photo and a test pattern."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([128 + 90 * np.sin(xx / (4 + c) + c) * np.cos(yy / (5 + 2 * c)) for c in range(3)], -1)
    base[h // 3: h // 2, w // 4: w // 2] = rng.integers(0, 255, 3)
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)


def to_tensor(img: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(img).permute(2, 0, 1).float()[None]


def train_recipe(**kw):
    from itervision.config.run_configs import TrainConfig
    from itervision.schema import parse

    base = dict(epochs=1, global_batch=6, lr=1e-3, lr_batch=6, min_lr=0, warmup_epochs=0, warmup_lr=0,
                weight_decay=0, randaugment=RA, crop_scale=[0.08, 1.0], crop_pad=0, hflip=0.5,
                interpolation="bicubic", mixup=0.0, cutmix=0.0, mix_prob=1.0, label_smoothing=0.1,
                random_erasing=0.25, repeated_aug=1, clip_grad=0, amp="none", ema=False, ema_decay=0.99,
                threads=1, curve_points=0, curve_images=1, augment_on="device")
    return parse(TrainConfig, {**base, **kw}, "test")


# ---------------------------------------------------------------------------------------------- shards

@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shards")
    root = make_tree(tmp / "imagenet")
    lst = tmp / "classes.txt"
    lst.write_text("\n".join(SYNSETS) + "\n")
    out = tmp / "prepared"
    summary = subset_imagenet(root, lst, out, holdout_per_class=1, calib_per_class=1, seed=0, short_side=None,
                              max_bad_fraction=0.2, images_per_shard=4)
    return root, out, summary


def expected_bytes(source: Path, short_side: int | None) -> bytes | None:
    """What a shard must hold for `source`: its own bytes (an RGB JPEG, no resize), else the image as RGB (alpha
    over white), resized on its short side (bicubic), saved once as JPEG quality 95; None if unreadable."""
    try:
        with Image.open(source) as im:
            im.load()
            if im.format == "JPEG" and im.mode == "RGB" and not short_side:
                return source.read_bytes()
            if im.mode in ("RGBA", "LA", "P"):
                im = Image.alpha_composite(Image.new("RGBA", im.size, (255, 255, 255, 255)), im.convert("RGBA"))
            im = im.convert("RGB")
            if short_side:
                w, h = im.size
                s = short_side / min(w, h)
                im = im.resize((max(1, round(w * s)), max(1, round(h * s))), Image.BICUBIC)
            buf = io.BytesIO()
            im.save(buf, "JPEG", quality=95)
            return buf.getvalue()
    except OSError:
        return None


def test_shards_round_trip_the_source_images(sharded):
    """Every image read back from the shards is byte for byte its source (an RGB JPEG) or the source's one
    conversion; the labels are the classes of their folders; the unreadable file is in no shard."""
    root, out, summary = sharded
    index = ShardIndex(out, ("train", "calib", "holdout", "val"))
    assert len(index) == sum(summary["totals"].values()) and 0 < summary["reencoded"] < len(index)
    assert len(list((out / "shards").glob("*.tar"))) == sum(len(v) for v in summary["shards"].values())
    kept = 0
    for i in range(len(index)):
        source = root / _source_of(out, index.keys[i])
        assert index.read(i) == expected_bytes(source, None)
        kept += index.read(i) == source.read_bytes()
        assert index.labels[i] == SYNSETS.index(index.keys[i].split("-")[1])
    assert kept == len(index) - summary["reencoded"]
    readable = [p for split in ("train", "val") for s in SYNSETS for p in (root / split / s).iterdir()
                if expected_bytes(p, None) is not None]
    assert len(readable) == len(index)


def _source_of(out: Path, key: str) -> str:
    import csv

    with open(out / "index.csv") as f:
        return next(r["source"] for r in csv.DictReader(f) if r["key"] == key)


def test_a_shard_resize_is_the_same_resize_of_the_source(sharded, tmp_path):
    root, _, _ = sharded
    lst = tmp_path / "classes.txt"
    lst.write_text("\n".join(SYNSETS) + "\n")
    out = tmp_path / "small"
    subset_imagenet(root, lst, out, holdout_per_class=1, seed=0, short_side=32, max_bad_fraction=0.2)
    index = ShardIndex(out, ("train", "holdout", "val"))
    for i in range(len(index)):
        source = root / _source_of(out, index.keys[i])
        assert index.read(i) == expected_bytes(source, 32)
        assert min(Image.open(io.BytesIO(index.read(i))).size) == 32


def test_flat_or_missing_val_is_refused_before_any_image_is_read(tmp_path):
    from itervision.data.source_list import write_listing
    from itervision.errors import UserError

    root = make_tree(tmp_path / "imagenet")
    lst = tmp_path / "classes.txt"
    lst.write_text("\n".join(SYNSETS) + "\n")
    for f in (root / "val" / SYNSETS[0]).iterdir():
        f.rename(root / "val" / f.name)
    (root / "val" / SYNSETS[0]).rmdir()
    with pytest.raises(UserError, match="is flat .* sort the images into val/<synset>/"):
        subset_imagenet(root, lst, tmp_path / "o", holdout_per_class=0, seed=0, max_bad_fraction=0.2)
    assert not (tmp_path / ".o.tmp").exists() and not (tmp_path / "o").exists()
    import shutil

    shutil.rmtree(root / "val")
    with pytest.raises(UserError, match="has no val/ folder"):
        write_listing(root, [lst], tmp_path / "list.csv")
    assert not (tmp_path / "list.csv").exists()


def test_a_listing_is_the_source_and_a_changed_file_is_refused(tmp_path):
    from itervision.data.source_list import write_listing
    from itervision.errors import UserError

    root = make_tree(tmp_path / "imagenet")
    lst = tmp_path / "classes.txt"
    lst.write_text("\n".join(SYNSETS) + "\n")
    listing = tmp_path / "imagenet.csv"
    n = write_listing(root, [lst], listing)
    assert n == sum(1 for split in ("train", "val") for s in SYNSETS for _ in (root / split / s).iterdir())
    a = subset_imagenet(listing, lst, tmp_path / "a", holdout_per_class=1, seed=0, max_bad_fraction=0.2)
    b = subset_imagenet(root, lst, tmp_path / "b", holdout_per_class=1, seed=0, max_bad_fraction=0.2)
    assert a["totals"] == b["totals"]
    assert (tmp_path / "a/index.csv").read_text() == (tmp_path / "b/index.csv").read_text()
    victim = sorted((root / "train" / SYNSETS[2]).iterdir())[0]
    victim.write_bytes(victim.read_bytes() + b"\0" * 10)
    with pytest.raises(UserError, match="changed size since the source was listed"):
        subset_imagenet(listing, lst, tmp_path / "c", holdout_per_class=1, seed=0, max_bad_fraction=0.2)


# ---------------------------------------------------------------------------------------------- RandAugment vs timm

def test_policy_and_magnitudes_are_timms(monkeypatch):
    from timm.data import auto_augment as aa

    policy = da.Policy.parse(RA, HP)
    ra = aa.rand_augment_transform(RA, dict(HP))
    assert policy.names == tuple(op.name for op in ra.ops) and policy.layers == ra.num_layers == 2
    assert policy.prob == 0.5 and policy.magnitude == 9 and policy.magnitude_std == 0.5
    monkeypatch.setattr(aa.random, "random", lambda: 0.0)  # timm's random sign: never negate
    for name in da.SUPPORTED:
        for m in (0.0, 3.7, 9.0, 9.6, 10.0):
            timm_args = aa.LEVEL_TO_ARG[name](m, HP) if aa.LEVEL_TO_ARG[name] else ()
            mine = da.level_value(name, m, HP)
            if not timm_args:
                continue
            want = timm_args[0]
            if name in ("ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing"):
                mine = max(0.1, 1 + mine)
            assert mine == pytest.approx(want, abs=1e-9), (name, m)


def pil_op(name: str, img: np.ndarray, value: float) -> np.ndarray:
    from timm.data import auto_augment as aa

    kwargs = {"fillcolor": HP["img_mean"], "resample": Image.BICUBIC}
    args = () if name in ("AutoContrast", "Equalize", "Invert") else (value,)
    if name.endswith("Increasing") and not name.startswith(("Posterize", "Solarize")):
        args = (max(0.1, 1 + value),)
    if name.startswith("Posterize"):
        args = (int(value),)
    if name.startswith("Solarize") and name != "SolarizeAdd":
        args = (int(value),)
    if name == "SolarizeAdd":
        args = (int(value),)
    return np.asarray(aa.NAME_TO_OP[name](Image.fromarray(img), *args, **kwargs), np.float64)


# grey levels of mean absolute difference allowed per op: lookup-table ops agree exactly; blends within the
# rounding of PIL's fixed point; geometry within the resampling kernels' difference (docs/data.md)
TOLERANCE = {"AutoContrast": 0.51, "Equalize": 0.01, "Invert": 0.0, "PosterizeIncreasing": 0.0,
             "SolarizeIncreasing": 0.0, "SolarizeAdd": 0.0, "ColorIncreasing": 0.6, "ContrastIncreasing": 0.6,
             "BrightnessIncreasing": 0.6, "SharpnessIncreasing": 0.8, "Rotate": 4.0, "ShearX": 4.0, "ShearY": 4.0,
             "TranslateXRel": 2.5, "TranslateYRel": 2.5}


@pytest.mark.parametrize("name", sorted(TOLERANCE))
def test_each_op_gives_timms_pixels(name):
    for seed in range(3):
        img = photo(seed)
        for m in (3.0, 9.0):
            for sign in (1.0, -1.0):
                value = da.level_value(name, m, HP) * (sign if name in da.SIGNED else 1.0)
                want = pil_op(name, img, value)
                got = da.apply_op(name, to_tensor(img), torch.tensor([value]), HP)[0].permute(1, 2, 0).numpy()
                diff = np.abs(got - want)
                assert diff.mean() <= TOLERANCE[name], (name, m, sign, diff.mean())
                assert got.min() >= 0 and got.max() <= 255 and np.all(got == np.round(got))


def test_whole_randaugment_outputs_are_distributed_as_timms():
    """The same 24 images through timm's RandAugment and the device version, 40 draws each: per-image change from
    the input (mean absolute difference) and the outputs' mean and spread agree within sampling error."""
    from timm.data.auto_augment import rand_augment_transform

    imgs = [photo(100 + i, 32, 32) for i in range(24)]
    timm_ra = rand_augment_transform(RA, {**HP, "interpolation": Image.BICUBIC})
    policy = da.Policy.parse(RA, HP)
    x = torch.cat([to_tensor(i) for i in imgs])
    t_change, d_change, t_mean, d_mean = [], [], [], []
    for draw in range(40):
        random.seed(draw)
        np.random.seed(draw)
        t = np.stack([np.asarray(timm_ra(Image.fromarray(i)), np.float64) for i in imgs])
        d = da.rand_augment(x.clone(), policy, torch.Generator().manual_seed(draw)).permute(0, 2, 3, 1).numpy()
        src = np.stack(imgs).astype(np.float64)
        t_change += list(np.abs(t - src).mean((1, 2, 3)))
        d_change += list(np.abs(d - src).mean((1, 2, 3)))
        t_mean += list(t.mean((1, 2, 3)))
        d_mean += list(d.mean((1, 2, 3)))
    for a, b in ((t_change, d_change), (t_mean, d_mean)):
        a, b = np.array(a), np.array(b)
        se = np.sqrt(a.var() / len(a) + b.var() / len(b))
        assert abs(a.mean() - b.mean()) < 4 * se, (a.mean(), b.mean(), se)
    # untouched images: both layers skipped (0.25) or ops without effect; the same share within sampling error
    t_same, d_same = np.mean(np.array(t_change) == 0), np.mean(np.array(d_change) == 0)
    assert abs(t_same - d_same) < 4 * np.sqrt(0.25 * 0.75 / len(t_change) * 2)


def test_random_resized_crop_draws_torchvisions_distribution():
    from torchvision.transforms import RandomResizedCrop

    torch.manual_seed(0)
    H, W, n = 375, 500, 4000
    tv = np.array([RandomResizedCrop.get_params(torch.zeros(1, H, W), (0.08, 1.0), (3 / 4, 4 / 3)) for _ in range(n)],
                  np.float64)
    mine = da.crop_boxes(torch.Generator().manual_seed(1), torch.tensor([[H, W]] * n), (0.08, 1.0)).double().numpy()
    for col, what in ((2, "height"), (3, "width")):
        a, b = tv[:, col], mine[:, col]
        assert abs(a.mean() - b.mean()) < 4 * np.sqrt(a.var() / n + b.var() / n), what
    area_tv, area = tv[:, 2] * tv[:, 3] / (H * W), mine[:, 2] * mine[:, 3] / (H * W)
    assert abs(area_tv.mean() - area.mean()) < 4 * np.sqrt(area_tv.var() / n + area.var() / n)
    assert (mine[:, 0] >= 0).all() and (mine[:, 0] + mine[:, 2] <= H).all() and (mine[:, 1] + mine[:, 3] <= W).all()
    # no crop fits: torchvision's fallback, the centre crop of the aspect clamped to [3/4, 4/3]
    tall = da.crop_boxes(torch.Generator().manual_seed(0), torch.tensor([[400, 100]]), (1.0, 1.0)).tolist()[0]
    torch.manual_seed(0)
    assert tall == list(RandomResizedCrop.get_params(torch.zeros(1, 400, 100), (1.0, 1.0), (3 / 4, 4 / 3)))


# ---------------------------------------------------------------------------------------------- batches

def test_device_batches_are_a_function_of_seed_epoch_and_batch(sharded):
    """The same batch after a resume (start at batch 1) and with 2 loader workers as with none; another seed
    gives other images."""
    _, out, _ = sharded
    train = train_recipe()
    batching = train.batching(1)
    full = list(train_batches(out, 32, train, batching, seed=3).epoch(0))
    assert len(full) >= 2 and tuple(full[0][1].shape) == (6, 3, 32, 32)
    resumed = list(train_batches(out, 32, train, batching, seed=3).epoch(0, start=1))
    assert [b for b, _, _ in resumed] == [b for b, _, _ in full[1:]]
    for (_, x, y), (_, x2, y2) in zip(full[1:], resumed):
        assert torch.equal(x, x2) and torch.equal(y, y2)
    workers = list(train_batches(out, 32, dataclasses.replace(train, workers=2), batching, seed=3).epoch(0))
    for (_, x, y), (_, x2, y2) in zip(full, workers):
        assert torch.equal(x, x2) and torch.equal(y, y2)
    other = list(train_batches(out, 32, train, batching, seed=4).epoch(0))
    assert not torch.equal(other[0][1], full[0][1])


def test_host_batches_do_not_depend_on_the_loader_workers(sharded):
    _, out, _ = sharded
    train = train_recipe(augment_on="host")
    batching = train.batching(1)
    a = list(train_batches(out, 32, train, batching, seed=3).epoch(0))
    b = list(train_batches(out, 32, dataclasses.replace(train, workers=2), batching, seed=3).epoch(0))
    assert all(torch.equal(x, x2) and torch.equal(y, y2) for (_, x, y), (_, x2, y2) in zip(a, b))


def test_device_batches_of_arrays_match_the_shard_path_shape_and_statistics(sharded):
    """The array path (CIFAR, MNIST at the paper scale) runs the same device augmentation on in-memory images."""
    from itervision.data.loaders import TensorBatches
    from itervision.data.augment import BatchAugment

    train = train_recipe()
    images = torch.from_numpy(np.stack([photo(i, 32, 32) for i in range(12)]))
    aug = da.DeviceAugment.from_train(train, 32, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25), "cpu")
    tb = TensorBatches(images, torch.arange(12), BatchAugment(32, (0.5,) * 3, (0.25,) * 3), batch_size=6, seed=0,
                       device_aug=aug)
    batches = list(tb.epoch(0))
    assert len(batches) == 2 and tuple(batches[0][1].shape) == (6, 3, 32, 32)
    assert torch.isfinite(batches[0][1]).all() and abs(float(batches[0][1].mean())) < 2.5


def test_the_shard_evaluation_set_is_val_and_holdout(sharded):
    _, out, summary = sharded
    assert describe_prepared(out)["kind"] == "imagenet"
    n = sum(len(y) for _, y in eval_batches(out, "test", 32, 4))
    assert n == summary["totals"]["val"] + summary["totals"]["holdout"]


@pytest.mark.slow
def test_the_input_rate_benchmark_runs_at_a_tiny_size(tmp_path):
    """benchmarks/input_speed.py (`make input-benchmark`) on a few photos: a rate per path and dataset, the CPU
    named, and a file the plan reads (planning/plan.load_input_rates)."""
    import json
    import subprocess

    from helpers import ROOT
    from itervision.planning.plan import load_input_rates

    out = tmp_path / "input.json"
    r = subprocess.run([sys.executable, "benchmarks/input_speed.py", "--images", "8", "--repeats", "1", "--out",
                        str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["cpu"] and data["threads"] == 1 and "not measured here" in data["gpu"]
    for ds in ("imagenet200", "imagenet100"):
        rates = data["per_core"][ds]
        assert rates["host"] > 0 and rates["device_on_cpu"] > 0 and rates["device_read"] > rates["host"]
    assert data["per_core"]["cifar10"]["host"] > 0 and data["per_core"]["mnist"]["device_on_cpu"] > 0
    assert load_input_rates(out)["per_core"] == data["per_core"]
