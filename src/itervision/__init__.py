"""itervision: a multi-seed reproducibility pipeline for iterative vision classifiers."""

__version__ = "0.1.0"
