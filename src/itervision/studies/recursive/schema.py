"""Params group `recursive`: the runs and comparisons of seed document 000."""
from __future__ import annotations

from dataclasses import dataclass

from itervision.schema import key
from itervision.studies.base import StudyParams


@dataclass(frozen=True, kw_only=True)
class RecursiveStudy(StudyParams):
    baseline: str = key(doc="table 1 differences are to this model")
    reference: str = key(doc="the model every ablation is compared with (a main model)")
    one_pass: str = key(default="", doc="the reference model at one step (a main model): what recursion adds over "
                        "one pass; '' for none")
    k_ablation: list[str] = key(default=[])
    depth_ablation: list[str] = key(default=[])
    embedding_ablation: list[str] = key(default=[])

    def check(self):
        if self.baseline not in self.main:
            raise ValueError(f"recursive.baseline '{self.baseline}' must be one of recursive.main")
        if self.reference not in self.main:
            raise ValueError(f"recursive.reference '{self.reference}' must be one of recursive.main")
        if self.one_pass and self.one_pass not in self.main:
            raise ValueError(f"recursive.one_pass '{self.one_pass}' must be one of recursive.main (it runs with every "
                             "seed)")
        for name in ("k_ablation", "depth_ablation", "embedding_ablation"):
            models = getattr(self, name)
            extra = [m for m in models if m not in self.main + self.ablations]
            if extra:
                raise ValueError(f"recursive.{name} names '{extra[0]}', which is in neither recursive.main nor "
                                 f"recursive.ablations")
            if models and self.reference not in models:
                raise ValueError(f"recursive.{name} must include the reference model '{self.reference}'")
