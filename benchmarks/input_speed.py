"""Input rates per CPU core of every data path of the paper recipe -> benchmarks/results/input.json, which
`make paper-plan CPUS_PER_GPU=N` reads to say which runs the input cannot feed (planning/plan.py).

    make input-benchmark                  # python benchmarks/input_speed.py
    python benchmarks/input_speed.py --images 32 --out /tmp/input.json   # a quick look

Each figure is images per second of one process on one core (torch at 1 thread), the work a loader process (or
the training process) does per image:
- imagenet200 / imagenet100, `host`: read from a shard, PIL decode, timm's training transforms of the recipe
  (RandomResizedCrop to 192 / 160 px, flip, RandAugment m9-mstd0.5-inc1, random erasing), as loader workers do;
- `device_read`: what a loader worker does on the device path: read the JPEG bytes from a shard;
- `device_on_cpu`: the device path's decode and batched augmentation run on this CPU (a reference for the
  tests' CPU device, not a GPU figure: on a GPU that work is the GPU's, measured by `make gpu-benchmark`);
- cifar10 / mnist, `host`: PIL RandAugment per image in the training process, plus the batched crop and flip
  (data/loaders.TensorBatches), `device_on_cpu` as above.
The images are natural-photo JPEGs at ImageNet's typical size (about 500 x 375, quality 90), cut from
matplotlib's sample photograph (the one photo a package ships here); ImageNet-100 is stored at short side 256, as
its subset is. Rates differ across CPUs: the file names the CPU.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

RECIPE = dict(randaugment="rand-m9-mstd0.5-inc1", crop_scale=[0.08, 1.0], hflip=0.5, interpolation="bicubic",
              random_erasing=0.25)
SIZES = {"imagenet200": (192, None), "imagenet100": (160, 256)}


def photos(n: int, seed: int = 0) -> list[bytes]:
    """n JPEGs (quality 90, about 500 x 375) cut from matplotlib's sample photograph at random places and scales."""
    import matplotlib
    from PIL import Image

    src = Image.open(Path(matplotlib.__file__).parent / "mpl-data/sample_data/grace_hopper.jpg").convert("RGB")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        w, h = src.size
        cw, ch = int(w * rng.uniform(0.5, 1.0)), int(h * rng.uniform(0.5, 1.0))
        x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        img = src.crop((x, y, x + cw, y + ch)).resize((int(rng.integers(400, 600)), int(rng.integers(300, 450))),
                                                      Image.BICUBIC)
        if rng.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def shard_set(folder: Path, jpegs: list[bytes], short_side: int | None) -> Path:
    """A sharded 'train' split of the photos (resized on the short side where asked, as the subset stage does)."""
    from PIL import Image

    from itervision.data.shards import ShardImage, write_index, write_shards

    images = []
    for i, data in enumerate(jpegs):
        img = Image.open(io.BytesIO(data))
        if short_side:
            s = short_side / min(img.size)
            img = img.resize((round(img.width * s), round(img.height * s)), Image.BICUBIC)
            buf = io.BytesIO()
            img.save(buf, "JPEG", quality=95)
            data = buf.getvalue()
        images.append(ShardImage(key=f"img{i}", split="train", class_index=i % 10, synset=f"c{i % 10}", data=data,
                                 path=None, width=img.width, height=img.height, source=f"photo{i}"))
    rows, _ = write_shards(images, folder, "train", 256)
    write_index(folder, rows)
    return folder


def rate(fn, n: int, repeats: int) -> float:
    """Images per second of `fn()` (which handles n images): the best of `repeats` timed calls after one warm-up
    (the best, since the other processes of a busy machine only ever slow a call down)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n / best


def imagenet_rates(folder: Path, size: int, repeats: int) -> dict:
    from itervision.data.device_augment import DeviceAugment, decode_jpegs
    from itervision.data.loaders import ShardImages, timm_transform
    from itervision.data.registry import IMAGENET_MEAN, IMAGENET_STD
    from itervision.data.shards import ShardIndex

    recipe = argparse.Namespace(**RECIPE)
    desc = {"channels": 3, "mean": IMAGENET_MEAN, "std": IMAGENET_STD}
    host = ShardImages(folder, ("train",), timm_transform(True, size, desc, recipe))
    index = ShardIndex(folder, ("train",))
    n = len(index)

    def host_path():
        for i in range(n):
            host[i]

    def device_read():
        for i in range(n):
            torch.frombuffer(bytearray(index.read(i)), dtype=torch.uint8)

    aug = DeviceAugment.from_train(argparse.Namespace(**RECIPE), size, IMAGENET_MEAN, IMAGENET_STD, "cpu")
    data = [torch.frombuffer(bytearray(index.read(i)), dtype=torch.uint8) for i in range(n)]

    def device_on_cpu():
        for start in range(0, n, 64):
            aug(decode_jpegs(data[start:start + 64], torch.device("cpu")), start)

    return {"host": rate(host_path, n, repeats), "device_read": rate(device_read, n, repeats),
            "device_on_cpu": rate(device_on_cpu, n, repeats), "images": n,
            "mean_bytes": float(np.mean(index.sizes))}


def array_rates(channels: int, size: int, n: int, repeats: int) -> dict:
    from itervision.data.augment import BatchAugment, augment
    from itervision.data.device_augment import DeviceAugment
    from itervision.data.loaders import _apply_pil, _rand_augment

    rng = np.random.default_rng(0)
    images = torch.from_numpy(rng.integers(0, 255, (n, size, size, channels), dtype=np.uint8))
    mean, std = (0.5,) * channels, (0.25,) * channels
    ra = _rand_augment(RECIPE["randaugment"], mean)
    batch_aug = BatchAugment(size, mean, std, tuple(RECIPE["crop_scale"]), 0, 0.5, RECIPE["random_erasing"],
                             "bilinear")

    def host_path():
        for start in range(0, n, 256):
            x = _apply_pil(images[start:start + 256], ra, start)
            augment(x, torch.Generator().manual_seed(start), batch_aug)

    aug = DeviceAugment.from_train(argparse.Namespace(**RECIPE), size, mean, std, "cpu")

    def device_on_cpu():
        for start in range(0, n, 256):
            aug(list(images[start:start + 256].permute(0, 3, 1, 2)), start)

    return {"host": rate(host_path, n, repeats), "device_on_cpu": rate(device_on_cpu, n, repeats), "images": n}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=256, help="photos per ImageNet measurement (default 256)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/input.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    from itervision.engine.environment import cpu_model
    from itervision.io import write_json

    t0 = time.time()
    jpegs = photos(args.images)
    per_core = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (size, short) in SIZES.items():
            per_core[name] = imagenet_rates(shard_set(Path(tmp) / name, jpegs, short), size, args.repeats)
            print(f"{name}: " + ", ".join(f"{k} {v:,.0f} img/s" for k, v in per_core[name].items()
                                          if k not in ("images", "mean_bytes")), flush=True)
    for name, (channels, size) in {"cifar10": (3, 32), "cifar100": (3, 32), "mnist": (1, 28),
                                   "fashion_mnist": (1, 28)}.items():
        per_core[name] = array_rates(channels, size, max(256, args.images * 4), args.repeats)
        print(f"{name}: " + ", ".join(f"{k} {v:,.0f} img/s" for k, v in per_core[name].items() if k != "images"),
              flush=True)
    out = {"cpu": cpu_model(), "cores": os.cpu_count(), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
           "threads": 1, "unit": "images per second of one process on one core", "per_core": per_core,
           "gpu": "not measured here: the device path's decode and augmentation on a GPU (make gpu-benchmark)",
           "seconds": round(time.time() - t0, 1)}
    write_json(args.out, out)
    print(f"wrote {args.out} in {out['seconds']} s")


if __name__ == "__main__":
    main()
