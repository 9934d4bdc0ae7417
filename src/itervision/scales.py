"""Parameter scales: configs/scales/cpu.yaml is complete, every other scale is an overlay onto it."""
from __future__ import annotations

from pathlib import Path

from itervision.errors import UserError
from itervision.params import deep_merge, load_params

SCALES_DIR = Path("configs/scales")


def render_scale(name: str, root: str | Path = ".") -> dict:
    base = load_params(Path(root) / SCALES_DIR / "cpu.yaml")
    if name == "cpu":
        return base
    path = Path(root) / SCALES_DIR / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in (Path(root) / SCALES_DIR).glob("*.yaml"))
        raise UserError(f"unknown scale '{name}'; known: {', '.join(known)}")
    return deep_merge(base, load_params(path))
