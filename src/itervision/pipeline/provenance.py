"""`make repro`: one warning line when the committed results were produced under another torch version or another
CPU capability than this machine would train them with. DVC cannot see this: the environment is recorded beside
each run (config.json), not part of its fingerprint, so `dvc repro` calls such results up to date although this
stack would not reproduce them bit for bit.

    python -m itervision.pipeline.provenance     # prints nothing when the stacks match; always exits 0
"""
from __future__ import annotations

import json
import os
import sys

from itervision.layout import study_metrics


def committed(study: str) -> list[dict]:
    """The environments a study's committed aggregate records (empty when there is none yet)."""
    try:
        with open(study_metrics(study)["aggregate"]) as f:
            return json.load(f).get("environments") or []
    except (OSError, ValueError):
        return []


def _torch_version() -> str | None:
    """torch.__version__ (local tag included, e.g. 2.14.1+cu130) read from the installed torch/version.py, without
    importing torch; None where that file is not found."""
    import importlib.util
    import re
    from pathlib import Path

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return None
    m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return m.group(1) if m else None


def here(capability: str) -> dict:
    """torch's version and the kernels' instruction set on this machine under the recipe's pin. Where the CPU's
    flags settle it (a pin the CPU has: torch then reports exactly that level), no torch import is needed: the
    version comes from the installed package's metadata (importing torch costs 1.5-2 s of every `make repro`)."""
    from itervision.config.run_configs import CPU_PINS, cpu_has

    version = _torch_version()
    if version and capability in CPU_PINS and cpu_has(capability) is True and capability != "native":
        return {"torch": version, "capability": capability.upper()}
    if cpu_has(capability) is not False:  # a pin this CPU lacks would make torch report it anyway
        os.environ.update(CPU_PINS.get(capability, {}))
    import torch

    return {"torch": torch.__version__, "capability": torch.backends.cpu.get_cpu_capability()}


def mismatches(envs: list[dict], now: dict) -> list[str]:
    out = []
    for e in envs:
        for key in ("torch", "capability"):
            if e.get(key) not in (None, "unrecorded") and e[key] != now[key]:
                out.append(f"{key} {e[key]} (here {now[key]})")
    return list(dict.fromkeys(out))


def main() -> None:
    from itervision.config.params import load_params, train_config

    p = load_params()
    pins = {train_config(p, ds, s).cpu_capability for s in p.studies for ds in p.study(s).datasets}
    now = here(next(iter(pins)) if len(pins) == 1 else "native")
    found = {s: mismatches(committed(s), now) for s in p.studies}
    found = {s: m for s, m in found.items() if m}
    if found:
        what = "; ".join(f"{s}: {', '.join(m)}" for s, m in found.items())
        print(f"warning: the committed results were produced under another stack ({what}); `dvc repro` calls them "
              f"up to date but would not reproduce them bit for bit here: `dvc repro --force` retrains them here",
              file=sys.stderr)


if __name__ == "__main__":
    main()
