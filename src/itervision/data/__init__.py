"""Datasets, subsetting and loaders."""
