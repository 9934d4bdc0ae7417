"""DVC stage: check params.yaml and write the resolved configuration of every (dataset, model) of every study.

    configs/resolved/DATASET/MODEL/model.json    architecture (every key the model reads), classes, channels
    configs/resolved/DATASET/MODEL/run.json      training recipe and evaluation keys for that dataset
    configs/resolved/DATASET/MODEL/profile.json  FLOP and timing keys

The run and profile stages depend on these files instead of on params groups, so a change retrains exactly
the models whose resolved configuration changed (e.g. `models.dsa-moe.topk` retrains dsa-moe alone, and a
top-k change of the architecture leaves dense models alone). This stage depends on the whole of params.yaml,
so every params rule is checked here, before any run stage trains, whatever DVC runs first. Its output persists
(dvc.yaml `persist: true`): a refused params.yaml leaves the previous configurations in place, and the stage swaps
the whole folder at once when it succeeds.
"""
import argparse
import os
from pathlib import Path

from itervision.errors import ArgumentParser, UserError, cli_entry
from itervision.io import commit_dir, fresh_temp_dir, write_json
from itervision.layout import RESOLVED_ROOT
from itervision.config.matrix import resolved_configs
from itervision.config.params import load_params


@cli_entry
def main(argv=None):
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default=str(RESOLVED_ROOT))
    args = ap.parse_args(argv)
    if Path(args.out).is_file():
        raise UserError(f"--out {args.out} is a file; give a folder")
    try:
        configs = resolved_configs(load_params(args.params))
    except UserError as err:
        if os.environ.get("DVC_EXP_BASELINE_REV"):  # `dvc exp run -S` wrote the value before this stage ran
            raise UserError(f"{err}; dvc exp run -S wrote it into {args.params}: `git checkout {args.params}` "
                            "restores the committed params (`dvc exp run --temp -S ...` tries values without "
                            "touching the workspace)") from None
        raise
    tmp = fresh_temp_dir(args.out)
    for (dataset, model), files in configs.items():
        for name, content in files.items():
            write_json(tmp / dataset / model / name, content)
    commit_dir(tmp, args.out)
    print(f"{len(configs)} (dataset, model) configurations -> {Path(args.out)}")


if __name__ == "__main__":
    main()
