"""Per-exit evaluation, early exit, cost accounting and timing."""
