"""Statistics over seeds for each study, from the run records (computes; reporting/ renders)."""
