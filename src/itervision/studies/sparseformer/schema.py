"""Params group `sparseformer`: the runs and comparisons of seed document 003."""
from __future__ import annotations

from dataclasses import dataclass

from itervision.schema import key
from itervision.studies.base import StudyParams


@dataclass(frozen=True, kw_only=True)
class SparseFormerStudy(StudyParams):
    static: list[str] = key(doc="static (one-round) models, drawn as points")
    recurrent: str = key()
    no_memory: str = key()
    budget_models: list[str] = key(doc="early exit is compared at the cost of each")
    target_model: str = key(doc="'compute needed to reach this model's accuracy'")
    frontier_points: int = key(2)

    def check(self):
        both = self.main + self.ablations
        if self.recurrent not in self.main:
            raise ValueError(f"sparseformer.recurrent '{self.recurrent}' must be one of sparseformer.main")
        for name, models in (("static", self.static), ("no_memory", [self.no_memory])):
            extra = [m for m in models if m not in both]
            if extra:
                raise ValueError(f"sparseformer.{name} names '{extra[0]}', which is in neither main nor ablations")
        bad = [m for m in self.budget_models if m not in self.static]
        if bad:
            raise ValueError(f"sparseformer.budget_models names '{bad[0]}', which is not in sparseformer.static")
        if self.target_model not in self.static:
            raise ValueError(f"sparseformer.target_model '{self.target_model}' is not in sparseformer.static")

    def check_models(self, config_of) -> None:
        for m in self.static:
            if len(config_of(m, self.datasets[0])["rounds"]) != 1:
                raise ValueError(f"sparseformer.static names '{m}', which has several rounds")
