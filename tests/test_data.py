"""Datasets and subsetting: source formats (idx, CIFAR pickles, ImageNet folders), the real Fashion-MNIST,
batched augmentation, bad inputs."""
import csv
import gzip
import io
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from itervision.data import sources
from itervision.data.augment import BatchAugment, augment, crop_flip_theta, erase, resize_eval
from itervision.data.class_lists import IMAGENET200_SEED, imagenet1k_synsets, render
from itervision.data.loaders import describe_prepared, eval_batches
from itervision.data.sources import load_source, read_class_list, read_idx
from itervision.data.shards import ShardIndex
from itervision.data.subset import subset_imagenet, subset_torchvision
from itervision.data.synthetic import cifar_dataset, idx_dataset
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
    with open(out / "index.csv") as f:
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
        by_split.setdefault(r["split"], set()).add(r["source"])
    assert not by_split["train"] & by_split["holdout"]
    assert not by_split["train"] & by_split["calib"]
    assert not by_split["holdout"] & by_split["calib"]
    index = ShardIndex(out, ("train", "calib", "holdout", "val"))
    for i, r in enumerate(rows):
        with Image.open(io.BytesIO(index.read(i))) as im:
            assert im.mode == "RGB" and min(im.size) == 32 and (im.width, im.height) == (int(r["width"]),
                                                                                     int(r["height"]))
        assert int(r["class_index"]) == SYNSETS.index(r["synset"])
    assert not (tmp_path / ".out.tmp").exists()


def test_imagenet_subset_is_deterministic_by_seed(tree, tmp_path):
    root, lst = tree
    kw = dict(holdout_per_class=2, short_side=None, max_bad_fraction=0.2)
    a = read_manifest((subset_imagenet(root, lst, tmp_path / "a", seed=1, **kw), tmp_path / "a")[1])
    b = read_manifest((subset_imagenet(root, lst, tmp_path / "b", seed=1, **kw), tmp_path / "b")[1])
    c = read_manifest((subset_imagenet(root, lst, tmp_path / "c", seed=2, **kw), tmp_path / "c")[1])
    assert a == b
    assert {r["source"] for r in a if r["split"] == "holdout"} != {r["source"] for r in c if r["split"] == "holdout"}


def test_imagenet_subset_full_resolution_keeps_size(tree, tmp_path):
    root, lst = tree
    out = tmp_path / "full"
    subset_imagenet(root, lst, out, holdout_per_class=1, seed=0, max_bad_fraction=0.2)
    rows = [r for r in read_manifest(out) if r["synset"] == SYNSETS[2] and r["split"] == "val"]
    assert rows
    for r in rows:
        assert Image.open(root / r["source"]).size == (int(r["width"]), int(r["height"]))


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
    desc = describe_prepared(out)
    assert desc["channels"] == 3 and desc["classes"] == SYNSETS and desc["kind"] == "imagenet"
    batches = list(eval_batches(out, "test", 32, 5))
    assert sum(len(y) for _, y in batches) == 6 + 6  # val + holdout
    x, y = batches[0]
    assert tuple(x.shape) == (5, 3, 32, 32) and 0 <= int(y.min()) and int(y.max()) < 3


def test_imagenet_class_without_usable_images_fails_and_leaves_nothing(tree, tmp_path):
    root, lst = tree
    for f in (root / "val" / SYNSETS[2]).iterdir():
        f.unlink()
    out = tmp_path / "out"
    with pytest.raises(UserError, match=f"class {SYNSETS[2]} has no evaluation image"):
        subset_imagenet(root, lst, out, holdout_per_class=0, seed=0, max_bad_fraction=0.2)
    assert not out.exists() and not (tmp_path / ".out.tmp").exists()
    # with a hold-out the class still has evaluation images: a warning, not an error
    subset_imagenet(root, lst, out, holdout_per_class=1, seed=0, max_bad_fraction=0.2)
    for f in (root / "train" / SYNSETS[2]).iterdir():
        f.write_bytes(b"not an image")
    with pytest.raises(UserError, match=f"class {SYNSETS[2]} has no usable train image"):
        subset_imagenet(root, lst, tmp_path / "again", holdout_per_class=0, seed=0, max_bad_fraction=0.9)


def test_class_lists():
    assert read_class_list(ROOT / "data/splits/imagenet200.txt") == render(200, IMAGENET200_SEED).splitlines()[1:]
    inet100 = read_class_list(ROOT / "data/splits/imagenet100.txt")
    assert len(inet100) == 100 and set(inet100) <= set(imagenet1k_synsets())
    shared = ROOT.parent / "shared" / "data" / "imagenet100_cmc.txt"
    if shared.exists():
        assert inet100 == read_class_list(shared)


def _fashion_available():
    try:
        sources.locate("fashion_mnist", sources.DEBIAN_FASHION_MNIST)
        return True
    except UserError:
        return False


fashion = pytest.mark.skipif(not _fashion_available(), reason="Fashion-MNIST not installed: "
                             "apt-get install -y dataset-fashion-mnist (make test does it when apt is usable)")


@fashion
def test_real_fashion_mnist_through_the_loading_code():
    classes, splits = load_source("fashion_mnist", sources.DEBIAN_FASHION_MNIST)
    (xtr, ytr), (xte, yte) = splits["train"], splits["test"]
    assert len(ytr) + len(yte) == 70_000 and classes[0] == "T-shirt/top" and len(classes) == 10
    assert xtr.shape[1:] == xte.shape[1:] == (28, 28, 1) and xtr.dtype == xte.dtype == np.uint8
    assert ytr.min() == 0 and ytr.max() == 9 and np.bincount(ytr).tolist() == [6000] * 10
    assert np.bincount(yte).tolist() == [1000] * 10


@fashion
def test_torchvision_subset_deterministic_disjoint_and_shuffled(tmp_path):
    kw = dict(classes=["Trouser", "Bag", 0], train_per_class=20, calib_per_class=5, test_per_class=7,
              root=sources.DEBIAN_FASHION_MNIST)
    m1 = subset_torchvision("fashion_mnist", tmp_path / "a", seed=4, **kw)
    m2 = subset_torchvision("fashion_mnist", tmp_path / "b", seed=4, **kw)
    assert m1["splits"] == m2["splits"]
    assert m1["classes"] == ["Trouser", "Bag", "T-shirt/top"]
    assert m1["splits"]["train"]["per_class"] == [20, 20, 20] and m1["splits"]["test"]["count"] == 21
    tr, ca = np.load(tmp_path / "a/train.npz"), np.load(tmp_path / "a/calib.npz")
    assert not set(tr["source_index"]) & set(ca["source_index"])
    assert tr["images"].shape == (60, 28, 28, 1) and set(tr["labels"]) == {0, 1, 2}
    assert len(set(tr["labels"][:6])) > 1  # a seeded random order, not sorted by class
    with pytest.raises(UserError, match="not in the source dataset"):
        subset_torchvision("fashion_mnist", tmp_path / "c", seed=0, **{**kw, "classes": ["Zebra"]})


def test_a_source_folder_without_the_files_is_one_line_naming_how_to_get_them(tmp_path):
    """Silent wrong result of the past: a root that was set but invalid fell back to another copy. Now the one
    folder data.sources names is read, or the error says how to fill it."""
    (tmp_path / "empty").mkdir()
    for name, hint in (("fashion_mnist", "apt"), ("cifar10", "python -m itervision.data.download cifar10")):
        with pytest.raises(UserError) as err:
            sources.locate(name, tmp_path / "empty")
        msg = str(err.value)
        assert f"data.sources.{name} = {tmp_path / 'empty'} does not hold the {name} files" in msg and "\n" not in msg
        assert hint in msg or "dataset-fashion-mnist" in msg
    with pytest.raises(UserError, match="does not hold"):
        sources.locate("mnist", tmp_path / "no-such-folder")


def test_idx_files_plain_gzip_and_torchvision_layout_read_alike(tmp_path):
    idx_dataset(tmp_path / "gz", 3, 2, seed=1)
    plain = tmp_path / "tv" / "FashionMNIST" / "raw"
    plain.mkdir(parents=True)
    for f in (tmp_path / "gz").iterdir():
        (plain / f.stem).write_bytes(gzip.decompress(f.read_bytes()))
    a = load_source("fashion_mnist", str(tmp_path / "gz"), verify=False)[1]
    b = load_source("fashion_mnist", str(tmp_path / "tv"), verify=False)[1]
    assert all(np.array_equal(a[s][i], b[s][i]) for s in ("train", "test") for i in (0, 1))
    assert a["train"][0].shape == (30, 28, 28, 1) and np.bincount(a["train"][1]).tolist() == [3] * 10


def test_a_changed_source_is_read_again(tmp_path):
    """Silent wrong result of the past: a staging cache that never refreshed. Nothing is cached now."""
    idx_dataset(tmp_path / "src", 3, 2, seed=1)
    first = load_source("fashion_mnist", str(tmp_path / "src"), verify=False)[1]["train"][0]
    idx_dataset(tmp_path / "src", 4, 2, seed=2)
    second = load_source("fashion_mnist", str(tmp_path / "src"), verify=False)[1]["train"][0]
    assert len(first) == 30 and len(second) == 40


@pytest.mark.parametrize("damage,expected", [
    (lambda b: b[: len(b) // 2], "not a readable gzip file"),
    (lambda b: b"this is not gzip at all", "not a readable gzip file"),
    (lambda b: gzip.compress(b"\x00\x00\x0c\x03" + gzip.decompress(b)[4:]), "not an idx file of unsigned bytes"),
    (lambda b: gzip.compress(gzip.decompress(b)[:-100]), "truncated"),
])
def test_a_corrupt_idx_file_is_one_line_naming_it(tmp_path, damage, expected):
    idx_dataset(tmp_path, 3, 2)
    f = tmp_path / "train-images-idx3-ubyte.gz"
    f.write_bytes(damage(f.read_bytes()))
    with pytest.raises(UserError, match=expected) as err:
        load_source("fashion_mnist", str(tmp_path), verify=False)
    assert str(f) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("name,classes", [("cifar10", 10), ("cifar100", 100)])
def test_cifar_pickles_are_read_as_data(tmp_path, name, classes):
    cifar_dataset(tmp_path, name, 2, 1)
    names, splits = load_source(name, str(tmp_path), verify=False)
    assert len(names) == classes and splits["train"][0].shape == (2 * classes, 32, 32, 3)
    assert np.bincount(splits["test"][1], minlength=classes).tolist() == [1] * classes


def test_a_pickle_that_would_run_code_is_refused(tmp_path):
    cifar_dataset(tmp_path, "cifar10", 1, 1)

    class Evil:
        def __reduce__(self):
            return (print, ("owned",))
    folder = tmp_path / "cifar-10-batches-py"
    (folder / "test_batch").write_bytes(pickle.dumps({"data": Evil(), "labels": [0]}))
    with pytest.raises(UserError, match="refusing to load builtins.print"):
        load_source("cifar10", str(tmp_path), verify=False)


def test_read_idx_against_hand_built_bytes(tmp_path):
    f = tmp_path / "x-idx2-ubyte"
    f.write_bytes(bytes([0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6]))
    assert read_idx(f).tolist() == [[1, 2, 3], [4, 5, 6]]


# ---------------------------------------------------------------------------------- batched augmentation

def _aug(**kw):
    return BatchAugment(**{"img_size": 8, "mean": (0.5,), "std": (0.25,), **kw})


def test_augment_without_any_augmentation_is_the_normalised_image():
    images = torch.randint(0, 256, (4, 8, 8, 1), dtype=torch.uint8)
    out = augment(images, torch.Generator().manual_seed(0), _aug())
    torch.testing.assert_close(out, (images.permute(0, 3, 1, 2).float() / 255 - 0.5) / 0.25)
    torch.testing.assert_close(resize_eval(images, 8, (0.5,), (0.25,)), out)
    assert resize_eval(images, 12, (0.5,), (0.25,)).shape == (4, 1, 12, 12)


def test_flip_mirrors_and_pad_crop_shifts_by_whole_pixels_with_zeros():
    images = torch.arange(64, dtype=torch.uint8).view(1, 8, 8, 1).repeat(64, 1, 1, 1)
    x = images.permute(0, 3, 1, 2).float() / 255
    out = augment(images, torch.Generator().manual_seed(1), _aug(hflip=1.0, mean=(0.0,), std=(1.0,)))
    torch.testing.assert_close(out, x.flip(-1))
    out = augment(images, torch.Generator().manual_seed(2), _aug(crop_pad=2, mean=(0.0,), std=(1.0,)))
    for o in out:  # each output is the input shifted by whole pixels, zeros where it left the image
        matches = [(dy, dx) for dy in range(-2, 3) for dx in range(-2, 3)
                   if torch.allclose(o, _shift(x[0], dy, dx), atol=1e-6)]
        assert len(matches) == 1
    assert len({tuple(o.flatten().tolist()) for o in out}) > 5  # shifts differ between images


def _shift(img, dy, dx):
    out = torch.zeros_like(img)
    H, W = img.shape[-2:]
    out[..., max(0, -dy):H - max(0, dy), max(0, -dx):W - max(0, dx)] = img[..., max(0, dy):H - max(0, -dy),
                                                                           max(0, dx):W - max(0, -dx)]
    return out


def test_random_resized_crop_areas_and_ratios_follow_the_requested_ranges():
    theta = crop_flip_theta(torch.Generator().manual_seed(0), 4000, 28, 28, _aug(crop_scale=(0.25, 0.5)))
    w, h = theta[:, 0, 0].abs(), theta[:, 1, 1]
    area = (w * h).numpy()
    assert area.min() >= 0.25 - 1e-6 and area.max() <= 0.5 + 1e-6 and abs(area.mean() - 0.375) < 0.01
    ratio = (w / h).numpy()
    assert ratio.min() >= 3 / 4 - 1e-6 and ratio.max() <= 4 / 3 + 1e-6
    assert (theta[:, 0, 2].abs() <= 1 - w + 1e-6).all()  # the crop stays inside the image


def test_random_erasing_boxes_follow_probability_and_area():
    x = torch.zeros(2000, 1, 16, 16)
    out = erase(x, torch.Generator().manual_seed(0), 0.5)
    erased = (out != 0).flatten(1).sum(1).float() / 256
    chosen = erased > 0
    assert abs(chosen.float().mean().item() - 0.5) < 0.05
    assert erased[chosen].min() >= 0.015 and erased[chosen].max() <= 1 / 3 + 0.05
    assert torch.equal(erase(x, torch.Generator().manual_seed(0), 0.0), x)


def test_augmentation_depends_only_on_the_generator():
    images = torch.randint(0, 256, (16, 28, 28, 1), dtype=torch.uint8)
    aug = _aug(img_size=28, crop_scale=(0.5, 1.0), crop_pad=2, hflip=0.5, random_erasing=0.3)
    a = augment(images, torch.Generator().manual_seed(7), aug)
    torch.manual_seed(123)
    torch.rand(100)
    assert torch.equal(a, augment(images, torch.Generator().manual_seed(7), aug))
    assert not torch.equal(a, augment(images, torch.Generator().manual_seed(8), aug))
    assert math.isfinite(a.sum().item())


@pytest.mark.parametrize("channels", [1, 3])
def test_randaugment_on_the_tensor_path_for_grayscale_and_colour(channels):
    from itervision.data.loaders import TensorBatches

    images = torch.randint(0, 256, (16, 28, 28, channels), dtype=torch.uint8)
    aug = BatchAugment(img_size=28, mean=(0.5,) * channels, std=(0.25,) * channels)
    a = TensorBatches(images, torch.arange(16) % 4, aug, batch_size=8, seed=0, randaugment="rand-m9-mstd0.5-inc1")
    b = TensorBatches(images, torch.arange(16) % 4, aug, batch_size=8, seed=0, randaugment="rand-m9-mstd0.5-inc1")
    first, second = list(a.epoch(0)), list(b.epoch(0))
    assert first[0][1].shape == (8, channels, 28, 28)
    assert all(torch.equal(x[1], y[1]) for x, y in zip(first, second))  # seeded per batch


def test_sources_are_checked_against_the_published_checksums(tmp_path):
    """Debian's recompressed Fashion-MNIST matches the official content; a synthetic stand-in with the official
    file names is refused in one line (idx .gz: md5 then content; CIFAR batches: md5), unless verify is off."""
    from itervision.errors import UserError

    if (sources.DEBIAN_FASHION_MNIST / "train-images-idx3-ubyte.gz").exists():
        assert sources.verify_file("fashion_mnist", sources.DEBIAN_FASHION_MNIST / "train-labels-idx1-ubyte.gz") \
            == "content"
    idx_dataset(tmp_path / "fm", 2, 1)
    with pytest.raises(UserError, match="does not match the published fashion_mnist data .* subset.verify_checksums"):
        load_source("fashion_mnist", str(tmp_path / "fm"))
    assert load_source("fashion_mnist", str(tmp_path / "fm"), verify=False)[1]["train"][0].shape[1:] == (28, 28, 1)
    idx_dataset(tmp_path / "mn", 2, 1)
    with pytest.raises(UserError, match="does not match the published md5 f68b3c2dcbeaaa9fbdd348bbdeb94873"):
        load_source("mnist", str(tmp_path / "mn"))
    cifar_dataset(tmp_path, "cifar10", 1, 1)
    with pytest.raises(UserError, match="data_batch_1 does not match the published md5 c99cafc1"):
        load_source("cifar10", str(tmp_path))
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "train-images-idx3-ubyte").write_bytes(b"x")
    assert sources.verify_file("mnist", raw / "train-images-idx3-ubyte") == "unchecked"  # no published sum
