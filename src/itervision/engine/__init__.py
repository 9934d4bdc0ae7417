"""Training: recipe, distributed data parallel, checkpoints and resume."""
