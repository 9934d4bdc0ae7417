"""A study is one unit: a folder under src/itervision/studies/ and one registry entry. A toy third study is added
to a copy of the tiny repository with nothing else of the code touched, and runs end to end through DVC."""
import re
import shutil
import subprocess

import pytest

from helpers import sh

pytestmark = pytest.mark.slow

SCHEMA = '''"""Params group `toy`."""
from dataclasses import dataclass

from itervision.studies.base import StudyParams


@dataclass(frozen=True, kw_only=True)
class ToyStudy(StudyParams):
    pass
'''
ANALYSIS = '''"""Top-1 over seeds of every main model."""
from itervision.config.params import Params
from itervision.stats import mean_ci
from itervision.studies.common import load_study, series, top1


def aggregate(p: Params) -> dict:
    s = p.study("toy")
    runs, _ = load_study(p, "toy")
    return {"seeds": p.seeds, "top1": {m: mean_ci(series(runs, s.datasets[0], m, p.seeds, top1)) for m in s.main}}


def summary_metrics(agg: dict) -> dict:
    return {m: {"top1": {"mean": v["mean"], "ci95": v["half_width"], "n": v["n"]}} for m, v in agg["top1"].items()}


def timing_metrics(agg: dict) -> dict:
    return {}
'''
TABLES = '''"""One table."""
from itervision.reporting.tables import fmt_ci, write_table


def write_tables(agg: dict, out_dir) -> None:
    write_table(out_dir / "table1_toy", "Table 1. Toy", ["model", "top-1"],
                [[m, fmt_ci(v)] for m, v in agg["top1"].items()])
'''
FIGURES = '''"""No figure: an empty folder."""
DVC_PLOTS = {}


def write_figures(agg: dict, out) -> None:
    out.mkdir(parents=True, exist_ok=True)
'''


def test_a_toy_third_study_is_a_folder_and_one_registry_entry(built_repo, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(built_repo, repo, symlinks=True)
    folder = repo / "src/itervision/studies/toy"
    folder.mkdir()
    for name, text in (("__init__", '"""Toy study."""\n'), ("schema", SCHEMA), ("analysis", ANALYSIS),
                       ("tables", TABLES), ("figures", FIGURES)):
        (folder / f"{name}.py").write_text(text)
    registry = repo / "src/itervision/studies/__init__.py"
    text = registry.read_text()
    text = text.replace("from itervision.studies.sparseformer.schema import SparseFormerStudy",
                        "from itervision.studies.sparseformer.schema import SparseFormerStudy\n"
                        "from itervision.studies.toy.schema import ToyStudy")
    text = re.sub(r"\n\)\}\n", '\n    Study("toy", "A toy document", ToyStudy, ("recursive",)),\n)}\n', text)
    registry.write_text(text)
    # the study's data: its params group, one model of its own, and its published numbers (none)
    params = repo / "params.yaml"
    params.write_text(re.sub(r"(?m)^models:\n", "toy:\n  datasets: [fashion_mnist]\n  main: [toy-mlp]\n"
                             "  ablations: []\n  ablation_datasets: []\nmodels:\n  "
                             "toy-mlp: {arch: recursive, attention: dense, ffn: mlp, steps: 2}\n",
                             params.read_text(), count=1))
    (repo / "data/reference/toy.csv").write_text("dataset,row,quantity,value,source\n")
    env = {"PYTHONPATH": str(repo / "src")}  # the copy's code, not the installed one
    sh("python -m itervision.pipeline.dvc_files", repo, env=env)
    assert (repo / "pipelines/toy/dvc.yaml").exists()
    out = sh("dvc repro report_toy", repo, env=env)
    ran = re.findall(r"Running stage '([^']+)'", out)
    assert "pipelines/toy/dvc.yaml:run_toy@fashion_mnist-toy-mlp-1" in ran and "report_toy" in ran
    assert not any("recursive@" in s or "sparseformer@" in s for s in ran), ran  # the other studies untouched
    assert "toy-mlp" in (repo / "metrics/toy/tables/table1_toy.md").read_text()
    changed = subprocess.run(["git", "status", "--porcelain", "src", "stages"], cwd=repo, capture_output=True,
                             text=True).stdout.split("\n")
    assert sorted(line[3:] for line in changed if line) == ["src/itervision/studies/__init__.py",
                                                            "src/itervision/studies/toy/"]
    help_text = sh("python stages/aggregate.py --help", repo, env=env)
    assert "toy" in help_text  # the CLI choices come from the registry
