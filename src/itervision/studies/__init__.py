"""The studies, one per source document: STUDIES maps a name to its registry entry (studies/base.py)."""
from __future__ import annotations

from itervision.studies.base import Study, StudyParams
from itervision.studies.recursive.schema import RecursiveStudy
from itervision.studies.sparseformer.schema import SparseFormerStudy

STUDIES = {s.name: s for s in (
    Study("recursive", "Dynamic Sparse Attention and Mixture-of-Experts for Iterative Visual Classification "
          "(seed document 000)", RecursiveStudy, ("recursive", "encoder"), interleaved="training"),
    Study("sparseformer", "Active sparse perception: the recurrent SparseFormer (seed document 003)",
          SparseFormerStudy, ("sparseformer",), interleaved="inference"),
)}

__all__ = ["STUDIES", "Study", "StudyParams"]
