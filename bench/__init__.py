"""Benchmarks, grouped by what they measure (kit/ holds what they share); results stay in this folder as RESULTS*.md.

The flat names of 0.5 (`python -m bench.publication`) still run until 0.7: each group is on this package's path.
"""

from pathlib import Path

GROUPS = ("kit", "workload", "tables", "data", "online", "faults")

__path__ += [str(Path(__file__).resolve().parent / group) for group in GROUPS]  # noqa: F821 (a package's __path__)
