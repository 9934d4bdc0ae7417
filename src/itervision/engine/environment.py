"""The machine and software a run ran on: the check that the recipe's CPU pin (train.cpu_capability,
config/run_configs.CPU_PINS) took effect, and the record of the environment beside the run's results
(config.json "environment"). Recorded, not part of the run fingerprint: an upgrade of torch must not silently
retrain every run, and must not hide either (`make repro` compares the record with the installed stack)."""
from __future__ import annotations

import platform
import sys
from importlib import metadata
from pathlib import Path

import torch

from itervision.errors import UserError

PACKAGES = ("torch", "torchvision", "timm", "numpy")


def check_cpu_pin(capability: str) -> None:
    """A CPU without the pinned instruction set would run other kernels (ATen falls back silently): refuse."""
    if capability == "native":
        return
    got = torch.backends.cpu.get_cpu_capability()
    if got.lower() != capability:
        raise UserError(f"this CPU runs torch's kernels at {got}, not the {capability.upper()} that "
                        f"train.cpu_capability pins, so its results would differ from the recipe's; run on a CPU "
                        f"with {capability.upper()}, or set train.cpu_capability to one this CPU has (retrains every "
                        f"run)")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def environment_record() -> dict:
    """What a run ran on: package versions, the CPU and the instruction set torch's kernels use, threads, OS,
    Python, and CUDA, cuDNN and the GPU where one is used."""
    gpu = torch.cuda.is_available()
    return {
        "packages": {p: torch.__version__ if p == "torch" else _version(p) for p in PACKAGES},
        "python": sys.version.split()[0], "os": f"{platform.system()} {platform.release()}",
        "cpu": {"model": cpu_model(), "capability": torch.backends.cpu.get_cpu_capability(),
                "threads": torch.get_num_threads()},
        "cuda": torch.version.cuda if gpu else None,
        "cudnn": torch.backends.cudnn.version() if gpu else None,
        "gpu": torch.cuda.get_device_name(0) if gpu else None,
    }
