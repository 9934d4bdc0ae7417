"""Shared argparse wiring of the per-run stages (not a stage itself). The study is a name, not a choice from the
studies registry: a run stage imports no study code, so adding or editing a study retrains nothing else."""
import argparse

from itervision.errors import ArgumentParser
from itervision.names import name_arg
from itervision.runs import MAX_SEED


def seed_arg(value: str) -> int:
    try:
        seed = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"seed {value!r} is not an integer") from None
    if not 0 <= seed <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"seed {value} is outside [0, {MAX_SEED}]")
    return seed


def run_parser(description: str) -> argparse.ArgumentParser:
    ap = ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--study", required=True, type=name_arg, help="the study the run belongs to, e.g. recursive")
    ap.add_argument("--dataset", required=True, type=name_arg, help="prepared dataset name, e.g. fashion_mnist")
    ap.add_argument("--model", required=True, type=name_arg, help="a model name under `models` in params.yaml")
    ap.add_argument("--seed", required=True, type=seed_arg)
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap
