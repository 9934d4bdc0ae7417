"""Aggregation of per-run results into statistics, tables and figures, per study."""
