"""What every study's params group has, and the registry entry that describes a study to the pipeline.

A study is one source document: a params group (its schema extends StudyParams), the model families its runs
build, and a package `itervision.studies.NAME` with `analysis` (aggregate, summary_metrics, timing_metrics),
`tables` (write_tables), `figures` (write_figures) and, optionally, `claims` (the document's claims for the
ledger, itervision/claims/). The stages, the run matrix, the generated DVC files and
the CLI choices all read the registry in studies/__init__.py; adding a study is a folder and one entry there.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from itervision.schema import key


@dataclass(frozen=True, kw_only=True)
class StudyParams:
    """The keys every study has: which models run on which datasets, and the study's own train keys."""
    datasets: list[str] = key(doc="datasets of the main models")
    main: list[str] = key(doc="run with every seed")
    # required even when empty: the generated DVC files read them (pipelines/STUDY-ablations/dvc.yaml)
    ablations: list[str] = key(doc="run with ablation_seeds on ablation_datasets")
    ablation_datasets: list[str] = key()
    train: dict[str, Any] = key(default={}, doc="train keys for this study's runs, on top of the train group")

    def check(self):
        """Rules across a study's own keys (model names are checked against `models` by params.py)."""

    def check_models(self, config_of) -> None:
        """Rules that need the resolved models: `config_of(model, dataset)` is a model's resolved config dict.
        Raise ValueError with the message."""


@dataclass(frozen=True)
class Study:
    name: str                  # the params group, the package, runs/NAME/, metrics/NAME*, plots/NAME/
    title: str                 # the source document
    schema: type               # a StudyParams subclass
    families: tuple[str, ...]  # model families its runs build (their modules are its runs' code)
    # stage timing_NAME measures its models as one: "training" (the main models' training time: the recursive
    # study's Table 2 ratios) or "inference" (wall-clock per exit: the SparseFormer study's Table 4); "" none
    interleaved: str = ""

    def part(self, name: str):
        """itervision.studies.NAME.<name>: analysis, tables or figures (imported on demand: matplotlib and the
        statistics are paid only by the stages that need them)."""
        return importlib.import_module(f"itervision.studies.{self.name}.{name}")

    def has_part(self, name: str) -> bool:
        import importlib.util

        return importlib.util.find_spec(f"itervision.studies.{self.name}.{name}") is not None

    def module_file(self, name: str) -> str:
        return f"src/itervision/studies/{self.name}/{name}.py"
