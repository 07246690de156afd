"""Synthetic images for tests and benchmarks: noisy copies of one random prototype per class (learnable)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from data.source import DataSource

SIZES = {"train": 4096, "validation": 512, "test": 512}
NOISE = 0.3


def load(input_shape: tuple[int, ...] = (28, 28, 1), num_classes: int = 10, seed: int = 0) -> DataSource:
    """A fixed synthetic data set, generated where it is read (no arrays shipped to workers)."""
    prototypes = np.random.default_rng(seed).uniform(size=(num_classes, *input_shape)).astype(np.float32)

    def split(name: str) -> tf.data.Dataset:
        offset = list(SIZES).index(name) * 10_000_000  # disjoint random streams per split

        def example(i):
            key = tf.stack([tf.constant(seed, tf.int64), i + offset])
            label = tf.random.stateless_uniform([], key, maxval=num_classes, dtype=tf.int32)
            noise = tf.random.stateless_normal(input_shape, key + 1) * NOISE
            return tf.gather(prototypes, label) + noise, label

        return tf.data.Dataset.range(SIZES[name]).map(example, num_parallel_calls=tf.data.AUTOTUNE)

    return DataSource(name="synthetic", input_shape=tuple(input_shape), num_classes=num_classes,
                      sizes=dict(SIZES), split=split)
