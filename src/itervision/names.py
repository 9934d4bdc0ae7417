"""Names that become paths and DVC stage names: models, datasets and studies, and the stages built from them.

A name is 1-64 characters of lower-case letters, digits, '-' and '_', starting with a letter or digit: it is a
folder name under runs/, configs/resolved/ and data/prepared/ and part of a DVC stage name, so it can hold no
'/', '..', space or shell character, and two names never differ only in case (one folder on macOS).
"""
from __future__ import annotations

import re

from itervision.errors import UserError

NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
NAME_RULE = "1-64 of a-z, 0-9, '-', '_', starting with a letter or digit"


def is_name(value) -> bool:
    return isinstance(value, str) and NAME.fullmatch(value) is not None


def check_name(value, what: str) -> str:
    """`value` if it is a valid name, else a one-line error naming `what` (e.g. "model name in recursive.main")."""
    if not is_name(value):
        raise UserError(f"{what} {value!r} is not a valid name ({NAME_RULE}); rename it")
    return value


def name_arg(value: str) -> str:
    """argparse type for --model/--dataset: a valid name, else argparse's own one-line usage error."""
    import argparse

    if not is_name(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a valid name ({NAME_RULE})")
    return value


# ------------------------------------------------------------------------------------------ DVC stages
# The one place that spells stage names; the generated DVC files (dvc_files.py) and every "regenerate it with
# `dvc repro ...`" hint use these.

def pipeline_file(study: str, ablation: bool) -> str:
    return f"pipelines/{study}{'-ablations' if ablation else ''}/dvc.yaml"


def run_stage(study: str, ablation: bool) -> str:
    return f"run_{study}{'_ablation' if ablation else ''}"


def profile_stage(study: str, ablation: bool) -> str:
    return f"profile_{study}{'_ablation' if ablation else ''}"


def run_stage_name(study: str, dataset: str, model: str, seed: int, ablation: bool) -> str:
    """The DVC stage that produces a run, as `dvc repro` takes it."""
    return f"{pipeline_file(study, ablation)}:{run_stage(study, ablation)}@{dataset}-{model}-{seed}"


def profile_stage_name(study: str, dataset: str, model: str, ablation: bool) -> str:
    return f"{pipeline_file(study, ablation)}:{profile_stage(study, ablation)}@{dataset}-{model}"


def subset_stage_name(dataset: str) -> str:
    return f"make_subset@{dataset}"
