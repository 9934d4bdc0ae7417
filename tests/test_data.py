"""Datasets and subsetting: a synthetic ImageNet-layout tree, real Fashion-MNIST, bad inputs."""
import csv
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from itervision.data import datasets
from itervision.data.class_lists import IMAGENET200_SEED, imagenet1k_synsets, render
from itervision.data.datasets import read_class_list
from itervision.data.loaders import build_transform, dataset_description, open_split
from itervision.data.subset import subset_imagenet, subset_torchvision
from itervision.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
SYNSETS = ["n01440764", "n01443537", "n01484850"]


def make_tree(root: Path, per_class=6, val_per_class=2):
    """JPEGs of varied sizes and modes (RGB, L, CMYK), a PNG with alpha, and one corrupt file."""
    rng = np.random.default_rng(0)
    for ci, syn in enumerate(SYNSETS):
        for split, n in (("train", per_class), ("val", val_per_class)):
            d = root / split / syn
            d.mkdir(parents=True)
            for i in range(n):
                w, h = int(rng.integers(40, 120)), int(rng.integers(40, 120))
                arr = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
                mode = ["RGB", "L", "CMYK"][(i + ci) % 3]
                img = Image.fromarray(arr).convert(mode)
                img.save(d / f"{syn}_{split}_{i}.JPEG", "JPEG")
    rgba = Image.fromarray(rng.integers(0, 255, (50, 70, 4), dtype=np.uint8), "RGBA")
    rgba.save(root / "train" / SYNSETS[0] / "alpha.png")
    (root / "train" / SYNSETS[1] / "broken.JPEG").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    return root


@pytest.fixture
def tree(tmp_path):
    root = make_tree(tmp_path / "imagenet")
    lst = tmp_path / "classes.txt"
    lst.write_text("# three classes\n" + "\n".join(SYNSETS) + "\n")
    return root, lst


def read_manifest(out):
    with open(out / "manifest.csv") as f:
        return list(csv.DictReader(f))


def test_imagenet_subset_counts_holdout_short_side_and_corrupt(tree, tmp_path):
    root, lst = tree
    out = tmp_path / "out"
    s = subset_imagenet(root, lst, out, holdout_per_class=2, calib_per_class=1, seed=3, short_side=32,
                        max_bad_fraction=0.2)
    rows = read_manifest(out)
    assert s["classes"] == SYNSETS
    # train files: class 0 has 6 JPEG + 1 PNG, class 1 has 6 + 1 corrupt (excluded), class 2 has 6
    assert sum(s["totals"].values()) == 7 + 6 + 6 + 3 * 2 and s["totals"]["val"] == 6
    assert s["per_class"]["holdout"][SYNSETS[0]] == 2 and s["per_class"]["holdout"][SYNSETS[2]] == 2
    assert s["per_class"]["calib"][SYNSETS[0]] == 1 and s["per_class"]["train"][SYNSETS[0]] == 4
    assert s["per_class"]["train"][SYNSETS[2]] == 3
    assert len(s["bad_images"]) == 1 and s["bad_images"][0]["path"].endswith("broken.JPEG")
    # hold-out and calibration images are disjoint from train
    by_split = {}
    for r in rows:
        by_split.setdefault(r["split"], set()).add(Path(r["path"]).name)
    assert not by_split["train"] & by_split["holdout"]
    assert not by_split["train"] & by_split["calib"]
    assert not by_split["holdout"] & by_split["calib"]
    for r in rows:
        with Image.open(out / r["path"]) as im:
            assert im.mode == "RGB" and min(im.size) == 32
        assert int(r["class_index"]) == SYNSETS.index(r["synset"])
    assert not (tmp_path / ".out.tmp").exists()


def test_imagenet_subset_is_deterministic_by_seed(tree, tmp_path):
    root, lst = tree
    kw = dict(holdout_per_class=2, short_side=None, max_bad_fraction=0.2)
    a = read_manifest((subset_imagenet(root, lst, tmp_path / "a", seed=1, **kw), tmp_path / "a")[1])
    b = read_manifest((subset_imagenet(root, lst, tmp_path / "b", seed=1, **kw), tmp_path / "b")[1])
    c = read_manifest((subset_imagenet(root, lst, tmp_path / "c", seed=2, **kw), tmp_path / "c")[1])
    assert a == b
    assert {r["path"] for r in a if r["split"] == "holdout"} != {r["path"] for r in c if r["split"] == "holdout"}


def test_imagenet_subset_full_resolution_keeps_size(tree, tmp_path):
    root, lst = tree
    out = tmp_path / "full"
    subset_imagenet(root, lst, out, holdout_per_class=1, seed=0, max_bad_fraction=0.2)
    src = {p.stem: Image.open(p).size for p in (root / "val" / SYNSETS[2]).iterdir()}
    for p in (out / "val" / SYNSETS[2]).iterdir():
        assert Image.open(p).size == src[p.stem]


def test_too_many_corrupt_images_fail_and_leave_nothing(tree, tmp_path):
    root, lst = tree
    out = tmp_path / "out"
    with pytest.raises(UserError, match="unreadable.*max_bad_fraction"):
        subset_imagenet(root, lst, out, holdout_per_class=1, seed=0, max_bad_fraction=0.01)
    assert not out.exists() and not (tmp_path / ".out.tmp").exists()


def test_bad_inputs_give_one_line_errors(tree, tmp_path):
    root, lst = tree
    with pytest.raises(UserError, match="no train/ folder"):
        subset_imagenet(tmp_path / "nowhere", lst, tmp_path / "o", holdout_per_class=1, seed=0)
    absent = tmp_path / "absent.txt"
    absent.write_text(SYNSETS[0] + "\nn99999999\n")
    with pytest.raises(UserError, match="class n99999999 .* is absent"):
        subset_imagenet(root, absent, tmp_path / "o", holdout_per_class=1, seed=0)
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n\n")
    with pytest.raises(UserError, match="is empty"):
        read_class_list(empty)
    with pytest.raises(UserError, match="not found"):
        read_class_list(tmp_path / "missing.txt")
    for err in (UserError("x"),):
        assert "\n" not in str(err)


def test_imagenet_loader_reads_eval_set(tree, tmp_path):
    root, lst = tree
    out = tmp_path / "out"
    subset_imagenet(root, lst, out, holdout_per_class=2, seed=0, short_side=40, max_bad_fraction=0.2)
    desc = dataset_description(out)
    assert desc["channels"] == 3 and desc["classes"] == SYNSETS
    test = open_split(out, "test", build_transform(False, 32, desc))
    assert len(test) == 6 + 6  # val + holdout
    x, y = test[0]
    assert tuple(x.shape) == (3, 32, 32) and 0 <= y < 3


def test_class_lists():
    assert read_class_list(ROOT / "data/splits/imagenet200.txt") == render(200, IMAGENET200_SEED).splitlines()[1:]
    inet100 = read_class_list(ROOT / "data/splits/imagenet100.txt")
    assert len(inet100) == 100 and set(inet100) <= set(imagenet1k_synsets())
    shared = ROOT.parent / "shared" / "data" / "imagenet100_cmc.txt"
    if shared.exists():
        assert inet100 == read_class_list(shared)


def _fashion_available():
    try:
        datasets.locate_fashion_mnist(None, ROOT / "data/raw", download=False)
        return True
    except UserError:
        return False


fashion = pytest.mark.skipif(not _fashion_available(), reason="Fashion-MNIST not installed: "
                             "apt-get install -y dataset-fashion-mnist (make test does it when apt is usable)")


@fashion
def test_real_fashion_mnist_through_the_loading_code():
    info, splits = datasets.load_torchvision("fashion_mnist", None, ROOT / "data/raw")
    (xtr, ytr), (xte, yte) = splits["train"], splits["test"]
    assert len(ytr) + len(yte) == 70_000
    assert xtr.shape[1:] == xte.shape[1:] == (28, 28, 1) and xtr.dtype == xte.dtype == np.uint8
    assert info.num_classes == 10 and info.channels == 1
    assert ytr.min() == 0 and ytr.max() == 9 and np.bincount(ytr).tolist() == [6000] * 10
    assert np.bincount(yte).tolist() == [1000] * 10


@fashion
def test_torchvision_subset_deterministic_disjoint(tmp_path):
    kw = dict(classes=["Trouser", "Bag", 0], train_per_class=20, calib_per_class=5, test_per_class=7,
              cache_root=str(ROOT / "data/raw"))
    m1 = subset_torchvision("fashion_mnist", tmp_path / "a", seed=4, **kw)
    m2 = subset_torchvision("fashion_mnist", tmp_path / "b", seed=4, **kw)
    assert m1["splits"] == m2["splits"]
    assert m1["classes"] == ["Trouser", "Bag", "T-shirt/top"]
    assert m1["splits"]["train"]["per_class"] == [20, 20, 20] and m1["splits"]["test"]["count"] == 21
    tr, ca = np.load(tmp_path / "a/train.npz"), np.load(tmp_path / "a/calib.npz")
    assert not set(tr["source_index"]) & set(ca["source_index"])
    assert tr["images"].shape == (60, 28, 28, 1) and set(tr["labels"]) == {0, 1, 2}
    with pytest.raises(UserError, match="not in the source dataset"):
        subset_torchvision("fashion_mnist", tmp_path / "c", seed=0, **{**kw, "classes": ["Zebra"]})


def test_missing_fashion_mnist_names_all_three_ways(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "DEBIAN_FASHION_MNIST", tmp_path / "no-debian")
    with pytest.raises(UserError) as err:
        datasets.locate_fashion_mnist(str(tmp_path / "nope"), tmp_path / "cache", download=False)
    msg = str(err.value)
    assert "data.roots.fashion_mnist" in msg and "apt-get install -y dataset-fashion-mnist" in msg
    assert "data.download: true" in msg and "\n" not in msg
