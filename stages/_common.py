"""Shared argparse wiring of the per-run stages (not a stage itself)."""
import argparse


def run_parser(description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--study", required=True, choices=("recursive", "sparseformer"))
    ap.add_argument("--dataset", required=True, help="prepared dataset name, e.g. fashion_mnist")
    ap.add_argument("--model", required=True, help="a model name under `models` in params.yaml")
    ap.add_argument("--seed", required=True, type=int)
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap
