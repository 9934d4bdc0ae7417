"""Switch params.yaml between scales: cpu (the shipped default) or paper, or tiny (for tests).

    python stages/set_scale.py paper     # then: dvc repro  (torchrun launcher, the four datasets, ImageNet)
    python stages/set_scale.py cpu       # back to the default

configs/scales/cpu.yaml is the full CPU-scale parameter set; other scales are overlays merged onto it
(mappings merged key by key, lists and values replaced).
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from itervision.errors import cli_entry  # noqa: E402
from itervision.io import write_yaml  # noqa: E402
from itervision.scales import render_scale  # noqa: E402


@cli_entry
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scale", help="cpu, paper, tiny, or any configs/scales/NAME.yaml")
    ap.add_argument("--out", default="params.yaml")
    args = ap.parse_args(argv)
    write_yaml(args.out, render_scale(args.scale))
    print(f"{args.out} now holds the {args.scale} scale")


if __name__ == "__main__":
    main()
