"""The model axis of the fault tests: the seed CNN on digits, and a tiny DLRM on synthetic clicks (its tables split
over the ps, its Adagrad accumulators with them; with dynamic tables for the reload), as training options laid
over a test's own."""

from __future__ import annotations

import pytest

DLRM = {"model": "dlrm", "dataset": "synthetic_criteo", "table_rows": 64, "embedding_dim": 4, "bottom_mlp": [8],
        "top_mlp": [8], "per_worker_batch": 32, "synthetic_examples": 1024, "min_shard_bytes": 256}
MODELS = {
    "cnn": {},
    "dlrm": DLRM,
    "dlrm_dynamic": {**DLRM, "embedding_kind": "dynamic", "embedding_capacity": 4000, "admit_after": 2,
                     "expire_after_steps": 400},  # ids admitted to rows, expired, spread again over a new ps count
}

each_model = pytest.mark.parametrize("model", ["cnn", "dlrm"])


def training(model: str, **options) -> dict:
    """A training section: the test's options, then the model's (a recommender brings its click data)."""
    return {**options, **MODELS[model]}
