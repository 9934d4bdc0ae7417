"""The CPU a run's kernels use: the check that the recipe's pin (train.cpu_capability, run_configs.CPU_PINS) took
effect, and the record of the CPU and instruction set beside the run's results."""
from __future__ import annotations

import platform
from pathlib import Path

import torch

from itervision.errors import UserError


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


def cpu_record() -> dict:
    """What a run's CPU kernels ran on: recorded with the run, not part of its fingerprint."""
    return {"model": cpu_model(), "capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads()}
