"""Parameter scales: configs/scales/cpu.yaml is complete, every other scale is an overlay onto it
(mappings merged key by key, lists and values replaced)."""
from __future__ import annotations

from pathlib import Path

from itervision.errors import UserError
from itervision.config.params import deep_merge, read_yaml_mapping

SCALES_DIR = Path("configs/scales")
SYNTHETIC_SCALES = ("paper-smoke",)  # scales whose data are synthetic: the claims ledger gives them no verdict


def render_scale(name: str, root: str | Path = ".", base: str = "cpu") -> dict:
    """The raw params of a scale: cpu.yaml with configs/scales/NAME.yaml on top (NAME may itself name a
    `base:` scale to build on, e.g. paper-smoke on paper)."""
    scales = Path(root) / SCALES_DIR
    if name == base:
        return read_yaml_mapping(scales / f"{base}.yaml")
    path = scales / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in scales.glob("*.yaml"))
        raise UserError(f"unknown scale '{name}'; known: {', '.join(known)}")
    overlay = read_yaml_mapping(path)
    parent = overlay.pop("base", base)
    return deep_merge(render_scale(parent, root, base), overlay)
