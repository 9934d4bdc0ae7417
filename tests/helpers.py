"""Test fixtures: model configs, a small synthetic prepared dataset in the subset stage's layout, tiny params."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from itervision.models.configs import RecursiveConfig, SparseFormerConfig
from itervision.schema import parse
from itervision.config.scales import render_scale

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

REC = dict(img_size=16, encoder_widths=[4, 8, 8], dim=16, heads=2, blocks=2, steps=5, attention="dsa", topk=3,
           dsa_kernel="masked", ffn="moe", mlp_ratio=2.0, experts=3, experts_per_token=2, moe_kernel="dense",
           embedding="hard",
           drop_path=0.0, step_loss="mean", earlier_weight=0.1, balance_weight=0.01, indexer_kl_weight=0.1)
SF = dict(img_size=28, stem_channels=6, stem_kernel=3, stem_stride=1, stem_pool=True, rounds=[1, 4, 9], points=4,
          focus_dim=8, focus_heads=2, focus_iters=2, cortex_dim=12, cortex_heads=2, cortex_depth=2,
          cortex_first_samples=True, mlp_ratio=4.0, memory=True, memory_at=0, memory_heads=2, drop_path=0.0,
          earlier_weight=0.1)


def rec_config(num_classes=5, in_chans=1, **kw) -> RecursiveConfig:
    """A complete recursive config through the params schema (keys that do not apply become None)."""
    return parse(RecursiveConfig, {**REC, **kw, "num_classes": num_classes, "in_chans": in_chans}, "test")


def sf_config(num_classes=4, in_chans=1, **kw) -> SparseFormerConfig:
    return parse(SparseFormerConfig, {**SF, **kw, "num_classes": num_classes, "in_chans": in_chans}, "test")


def tiny_params(root: Path, per_class=(20, 5), run: dict | None = None, **train) -> dict:
    """The repository's tiny scale in `root`, reading a synthetic Fashion-MNIST (real idx format, 20 train and
    5 test images per class) from root/source; written to root/params.yaml. Images are read at 16 px. `run`:
    keys of the run group (gpus, placement)."""
    from itervision.data.synthetic import idx_dataset

    source = root / "source" / "fashion_mnist"
    if not source.exists():
        idx_dataset(source, *per_class)
    params = render_scale("tiny", ROOT)
    params["data"]["sources"] = {"fashion_mnist": str(source)}
    params["subset"]["torchvision"]["fashion_mnist"] = {"classes": "all", "calib_per_class": 4,
                                                        "train_per_class": "all", "test_per_class": "all"}
    params["architectures"]["recursive"]["img_size"] = 16
    params["architectures"]["sparseformer"]["img_size"] = 16
    params["train"].update({"epochs": 2, "global_batch": 8, "lr_batch": 8, "curve_points": 2, "curve_images": 8,
                            **train})
    params["run"].update(run or {})
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return params


def prepare(root: Path, run: dict | None = None, **train) -> dict:
    """tiny_params, then the subset and configure stages' work in `root` (as `dvc repro` would)."""
    import os

    from itervision.data.subset import subset_torchvision
    from itervision.io import write_json as _write
    from itervision.config.matrix import resolved_configs
    from itervision.config.params import load_params

    raw = tiny_params(root, run=run, **train)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        p = load_params()
        spec = p.subset.torchvision["fashion_mnist"]
        subset_torchvision("fashion_mnist", "data/prepared/fashion_mnist", classes=spec.classes,
                           train_per_class=spec.train_per_class, calib_per_class=spec.calib_per_class,
                           test_per_class=spec.test_per_class, seed=0, root=p.data.sources["fashion_mnist"],
                           verify=p.subset.verify_checksums)
        for (ds, m), files in resolved_configs(p).items():
            for name, content in files.items():
                _write(Path("configs/resolved") / ds / m / name, content)
    finally:
        os.chdir(cwd)
    return raw


def sh(cmd, cwd, timeout=900, env=None, check=True):
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1", **(env or {})}
    r = subprocess.run(cmd, cwd=cwd, shell=True, capture_output=True, text=True, timeout=timeout, env=env)
    if check:
        assert r.returncode == 0, f"{cmd} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout + r.stderr


def build_tiny(dst: str, session_pid: str) -> None:
    """The session's tiny repository (tests/conftest.py starts this in a process of its own): make_repo, a complete
    `dvc repro`, the results committed; then a file `built` beside it, or `failed` with the error in build.log.
    It stops (with every process it started) when the pytest session that asked for it is gone."""
    import signal
    import threading
    import time
    import traceback

    def watch():
        while True:
            try:
                os.kill(int(session_pid), 0)
            except ProcessLookupError:
                os.killpg(os.getpgrp(), signal.SIGTERM)
            time.sleep(2)

    threading.Thread(target=watch, daemon=True).start()
    repo = Path(dst)
    try:
        make_repo(repo)
        out = sh("dvc repro", repo)
        assert "Running stage 'report_sparseformer'" in out, out[-2000:]
        sh("git add -A && git -c user.email=t@t -c user.name=t commit -qm results", repo)
    except BaseException:
        traceback.print_exc()
        (repo.parent / "failed").write_text("see build.log\n")
        raise
    (repo.parent / "built").write_text("ok\n")


def make_repo(dst: Path) -> Path:
    """A git repository with the project's files at the tiny scale, reading a synthetic Fashion-MNIST."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        src = ROOT / f
        generated = f.startswith(("metrics/", "plots/", "configs/resolved/")) or f.endswith("dvc.lock")
        if src.is_file() and not generated:
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / f)
    from itervision.data.synthetic import idx_dataset

    idx_dataset(dst / "synthetic" / "fashion_mnist", 30, 10)
    (dst / ".gitignore").write_text((dst / ".gitignore").read_text() + "/synthetic/\n")
    (dst / ".dvc" / "config").write_text("[core]\n    analytics = false\n")  # no shared cache here
    sh("git init -q && git add -A && git -c user.email=t@t -c user.name=t commit -qm init", dst)
    sh(f"{sys.executable} stages/set_scale.py tiny", dst)
    params = (dst / "params.yaml").read_text().replace("fashion_mnist: /usr/share/datasets/fashion-mnist",
                                                       "fashion_mnist: synthetic/fashion_mnist")
    (dst / "params.yaml").write_text(params)
    sh("git add -A && git -c user.email=t@t -c user.name=t commit -qm tiny", dst)
    return dst
