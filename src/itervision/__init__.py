"""itervision: a multi-seed reproducibility pipeline for iterative vision classifiers."""

__version__ = "0.1.0"

import warnings

# fvcore and timm import torch.jit.script at import time; the deprecation notice is not ours to act on.
warnings.filterwarnings("ignore", message=".*torch.jit.script.*is deprecated", category=FutureWarning)
