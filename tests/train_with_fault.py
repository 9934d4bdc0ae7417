"""Test hook runner: train one run like stages/run.py, with a fault at a global step (run in a subprocess).

    python tests/train_with_fault.py MODEL SEED crash|nan STEP
crash: the process ends at once with status 137 (like kill -9: no clean-up); nan: the loss becomes NaN.
"""
import os
import sys

import torch

from itervision.engine.train import train_run
from itervision.errors import cli_entry
from itervision.layout import prepared_dir
from itervision.runs import RunRecord
from itervision.config.specs import read_model_spec, read_run_spec


@cli_entry
def main():
    model, seed, fault, at = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    study = "sparseformer" if model.startswith("sf-") else "recursive"

    def hook(step, loss):
        if step == at and fault == "crash":
            os._exit(137)
        return loss * float("nan") if step == at and fault == "nan" else loss

    torch.manual_seed(1234)  # anything the caller's generators did before must not matter
    train_run(record=RunRecord(study, "fashion_mnist", model, seed), spec=read_model_spec("fashion_mnist", model),
              train=read_run_spec("fashion_mnist", model).train, prepared=prepared_dir("fashion_mnist"), progress=True,
              step_hook=hook)


if __name__ == "__main__":
    main()
