"""Dispatcher-level op counts of a training step, and a check that a step reads nothing back from the device.

An op count is a device-independent proxy for launch-bound cost: each ATen op that reaches the dispatcher is
at least one kernel on a GPU. `step_ops` runs what stages/run.py runs per step (forward at every exit, weighted
soft-target cross-entropy plus the auxiliary losses, backward) under a TorchDispatchMode that counts every op.

`fake_step` runs the same step, and an evaluation forward, under FakeTensorMode: tensors carry shapes but no
data, so any op whose output shape depends on data (bincount, nonzero, `.item()`, a shape read from a tensor)
raises. A model that passes has no host read in its step: nothing that would make the host wait for the device.
"""
from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from itervision.engine.recipe import step_loss


class OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def training_step(model, img: torch.Tensor, num_classes: int) -> None:
    """Forward at every exit, weighted soft-target CE + auxiliary loss, backward (no optimiser)."""
    out = model(img)
    soft = torch.full((img.shape[0], num_classes), 1.0 / num_classes)
    weights = torch.tensor(model.exit_loss_weights())
    step_loss(out, soft, weights)[0].backward()


def step_ops(model, batch: int) -> Counter:
    """ATen ops of one training step at `batch` images (random input)."""
    cfg = model.cfg
    img = torch.randn(batch, cfg.in_chans, cfg.img_size, cfg.img_size)
    model.train()
    with OpCounter() as counter:
        training_step(model, img, cfg.num_classes)
    model.zero_grad(set_to_none=True)
    return counter.ops


def fake_step(model, batch: int = 2) -> None:
    """A training step and an evaluation forward on fake tensors; raises on any data-dependent host read."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    cfg = model.cfg
    with FakeTensorMode(allow_non_fake_inputs=True):
        img = torch.randn(batch, cfg.in_chans, cfg.img_size, cfg.img_size)
        model.train()
        training_step(model, img, cfg.num_classes)
        model.eval()
        with torch.no_grad():
            model(img)
    model.zero_grad(set_to_none=True)
