"""DVC stage: parameters, multiply-adds, sparsity and GFLOPs per exit of every model at the paper
configurations (configs/scales/paper.yaml), the figures the claims ledger holds against the published ones:
metrics/paper_costs.json. Counted once, analytically for the recursive classifier and by fvcore for SparseFormer,
independent of what this scale trains."""
from itervision.errors import ArgumentParser, cli_entry
from itervision.evaluation.paper_costs import paper_costs
from itervision.io import write_json


@cli_entry
def main(argv=None):
    ap = ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="metrics/paper_costs.json")
    args = ap.parse_args(argv)
    write_json(args.out, paper_costs())


if __name__ == "__main__":
    main()
