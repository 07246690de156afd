"""Synthetic images for tests and benchmarks: noisy copies of one random prototype per class (learnable)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from data.source import DataSource

SIZES = {"train": 4096, "validation": 512, "test": 512}
SHAPE = (28, 28, 1)
NOISE = 0.3
SPLIT_STRIDE = 10_000_000  # example numbers of each split start here times its position: disjoint random streams


def load(input_shape: tuple[int, ...] = SHAPE, num_classes: int = 10, seed: int = 0,
         train_examples: int = SIZES["train"]) -> DataSource:
    """A fixed synthetic data set, generated where it is read from example numbers (no arrays shipped to workers)."""
    sizes = {**SIZES, "train": train_examples}
    prototypes = np.random.default_rng(seed).uniform(size=(num_classes, *input_shape)).astype(np.float32)

    def example(i):
        key = tf.stack([tf.constant(seed, tf.int64), i])
        label = tf.random.stateless_uniform([], key, maxval=num_classes, dtype=tf.int32)
        noise = tf.random.stateless_normal(input_shape, key + 1) * NOISE
        return tf.gather(prototypes, label) + noise, label

    numbers = {name: (np.arange(size, dtype=np.int64) + position * SPLIT_STRIDE,)
               for position, (name, size) in enumerate(sizes.items())}
    return DataSource(name="synthetic", input_shape=tuple(input_shape), num_classes=num_classes,
                      sizes=sizes, units=numbers, decode=example, cache_examples=True)
