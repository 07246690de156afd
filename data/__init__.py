"""Input pipelines: one module per source, each returning a data.source.DataSource."""

from __future__ import annotations


def load_source(name: str, data_dir: str | None = None, seed: int = 0):
    """The DataSource for a dataset name from the training options (imports TensorFlow)."""
    if name == "digits":
        from data import digits
        return digits.load()
    if name == "synthetic":
        from data import synthetic
        return synthetic.load(seed=seed)
    raise ValueError(f"unknown dataset {name!r}")  # options validation rejects unknown names first
