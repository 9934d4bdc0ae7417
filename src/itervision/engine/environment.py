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


def check_cpu_pin(capability: str, device_type: str = "cpu") -> str | None:
    """A CPU run on a CPU without the pinned instruction set would run other kernels (ATen falls back silently):
    refuse it, naming the setting that works here. A run that computes on a GPU is not tied to the CPU: it gets a
    one-line note instead (returned), and its fingerprint leaves the pin out (run_configs.CPU_RECIPE)."""
    from itervision.config.run_configs import best_capability, cpu_has

    if capability == "native":
        return None
    got = torch.backends.cpu.get_cpu_capability()
    has = cpu_has(capability)  # the hardware's flags: torch reports whatever ATEN_CPU_CAPABILITY says
    if has is not False and got.lower() == capability:
        return None
    works = best_capability()
    if has is False:  # what the hardware runs, not what the (ignored) pin made torch report
        got = {"avx512": "AVX512", "avx2": "AVX2"}.get(works, "a level below AVX2")
    if device_type != "cpu":
        return (f"note: this node's CPU runs torch's kernels at {got}, not the {capability.upper()} of "
                f"train.cpu_capability; this run computes on the GPU, so the pin does not bind it (silence this "
                f"with -S train.cpu_capability={works})")
    raise UserError(f"this CPU runs torch's kernels at {got}, not the {capability.upper()} that train.cpu_capability "
                    f"pins, so a CPU run's results would differ from the recipe's; run on a CPU with "
                    f"{capability.upper()}, or `dvc exp run -S train.cpu_capability={works}` (any CPU, ARM included: "
                    f"native; retrains every CPU run)")


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
