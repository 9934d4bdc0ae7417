"""Models of both documents. `registry.build_model(config, num_classes, in_chans)` builds one from its resolved
config (params.model_config); `configs` holds the config classes, importable without torch."""
