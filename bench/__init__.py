"""Benchmarks that print figures and ratios against a reference measured in the same run (never timed
tests). Run one as a module from the repository root: ``python -m bench.<name> --help``."""
