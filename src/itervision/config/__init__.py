"""Configuration: params.yaml checked and typed (params, run_configs, specs), scales, and the run matrix."""
