"""The model axis of the fault tests: the seed CNN on digits, and a tiny DLRM on synthetic clicks (its tables split
over the ps, its Adagrad accumulators with them), as training options laid over a test's own."""

from __future__ import annotations

import pytest

MODELS = {
    "cnn": {},
    "dlrm": {"model": "dlrm", "dataset": "synthetic_criteo", "table_rows": 64, "embedding_dim": 4,
             "bottom_mlp": [8], "top_mlp": [8], "per_worker_batch": 32, "min_shard_bytes": 256},
}

each_model = pytest.mark.parametrize("model", list(MODELS))


def training(model: str, **options) -> dict:
    """A training section: the test's options, then the model's (a recommender brings its click data)."""
    return {**options, **MODELS[model]}
