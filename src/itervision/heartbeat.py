"""A run's heartbeat: a small JSON file the training loop rewrites as it makes progress (step, images/s, phase),
so that whoever launched the run can tell a slow run from a stalled one (an NCCL hang, a dead file system) and
show its progress. The launcher names the file in the environment (ITERVISION_HEARTBEAT; the campaign does);
without it nothing is written. Beats come from the thread that trains, never from a helper thread, so a hang
of the training stops them."""
from __future__ import annotations

import os
import socket
import time

from itervision.io import write_json

ENV = "ITERVISION_HEARTBEAT"
EVERY = 5.0  # seconds: at most one write per interval


class Heartbeat:
    def __init__(self, path: str | None = None, every: float = EVERY):
        self.path = path if path is not None else os.environ.get(ENV)
        self.every, self.last = every, 0.0

    def beat(self, phase: str, force: bool = False, **info) -> None:
        if not self.path:
            return
        now = time.time()
        if not force and now - self.last < self.every:
            return
        self.last = now
        write_json(self.path, {"time": now, "phase": phase, "host": socket.gethostname(), "pid": os.getpid(),
                               **info})
