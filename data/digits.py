"""The embedded UCI handwritten digits (8×8×1, 10 classes): real data for the default run, no download."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from data.source import DataSource

CSV_PATH = Path(__file__).resolve().parent / "embedded" / "digits.csv.gz"
VALIDATION_SIZE = 180
TEST_SIZE = 180
SPLIT_SEED = 1998  # fixed: every process must cut the same splits


def _load_arrays() -> tuple[np.ndarray, np.ndarray]:
    with gzip.open(CSV_PATH, "rt") as handle:
        table = np.loadtxt(handle, delimiter=",", dtype=np.int32)
    images = (table[:, :64] / 16.0).astype(np.float32).reshape(-1, 8, 8, 1)
    return images, table[:, 64]


def load() -> DataSource:
    """Splits the 1,797 images into fixed train / validation / test parts."""
    images, labels = _load_arrays()
    order = np.random.default_rng(SPLIT_SEED).permutation(len(labels))
    cuts = {"test": order[:TEST_SIZE], "validation": order[TEST_SIZE:TEST_SIZE + VALIDATION_SIZE],
            "train": order[TEST_SIZE + VALIDATION_SIZE:]}

    return DataSource(name="digits", input_shape=(8, 8, 1), num_classes=10,
                      sizes={name: len(index) for name, index in cuts.items()},
                      units={name: (images[index], labels[index]) for name, index in cuts.items()})
