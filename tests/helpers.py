"""Test fixtures: a small synthetic prepared dataset in the subset stage's layout, and tiny params."""
from pathlib import Path

import numpy as np
import yaml

from itervision.io import write_json
from itervision.scales import render_scale

ROOT = Path(__file__).resolve().parents[1]


def make_prepared(root: Path, name: str = "synth", classes: int = 4, size: int = 16, per_class=(16, 4, 4)):
    """Images whose class is a bright quadrant, so a model can learn something in a few steps."""
    rng = np.random.default_rng(0)
    out = root / "data" / "prepared" / name
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"dataset": name, "classes": [f"c{i}" for i in range(classes)], "channels": 1, "native_size": size,
                "mean": [0.5], "std": [0.25], "splits": {}}
    for split, n in zip(("train", "calib", "test"), per_class):
        labels = np.repeat(np.arange(classes), n)
        images = rng.integers(0, 80, (len(labels), size, size, 1), dtype=np.uint8)
        h = size // 2
        for i, c in enumerate(labels):
            y, x = divmod(int(c) % 4, 2)
            images[i, y * h:(y + 1) * h, x * h:(x + 1) * h] += 150
        np.savez(out / f"{split}.npz", images=images, labels=labels.astype(np.int64),
                 source_index=np.arange(len(labels)))
        manifest["splits"][split] = {"file": f"{split}.npz", "count": int(len(labels))}
    write_json(out / "manifest.json", manifest)
    return out


def tiny_params(root: Path, **train) -> dict:
    """The repository's tiny scale, pointed at the synthetic dataset; written to root/params.yaml."""
    params = render_scale("tiny", ROOT)
    params["recursive"]["datasets"] = params["recursive"]["ablation_datasets"] = ["synth"]
    params["sparseformer"]["datasets"] = params["sparseformer"]["ablation_datasets"] = ["synth"]
    params["architectures"]["recursive"]["img_size"] = 16
    params["architectures"]["sparseformer"]["img_size"] = 16
    params["train"].update({"epochs": 2, "batch_size": 8, "lr_batch": 8, **train})
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return params
