"""How table rows and their optimizer slots start, made in one graph on the variable's device (callable initial
values: under ParameterServerStrategy each shard is made on its own ps, and no value is built on the chief)."""

from __future__ import annotations

import tensorflow as tf

INIT_SCALE = 0.05  # the range of tf_keras' Embedding default initializer


@tf.function
def _uniform_rows(shape, dtype):
    return tf.random.uniform(shape, -INIT_SCALE, INIT_SCALE, dtype)


def uniform_table(shape, dtype=tf.float32, partition_shape=None, **_):
    """A table's (or, under a partitioner, one shard's: `partition_shape`) initial value, made in one graph on the
    variable's device so the random draw, its scaling and shift reuse one buffer: eagerly each was a full-size
    temporary (a 1 GB table peaked at 3.7 GB). Honouring `partition_shape` matters as much: given a full-size
    value, ParameterServerStrategy builds the whole table on each shard's ps and slices it."""
    return _uniform_rows(tf.TensorShape(partition_shape or shape), tf.as_dtype(dtype))


@tf.function
def _filled(shape, dtype, value):
    return tf.fill(shape, tf.cast(value, dtype))


def filled(shape, dtype, value, partition_shape=None, **_):
    """`shape` (or one shard's `partition_shape`) filled with `value`. The value goes in as a tensor: as a Python
    number Grappler would fold the fill into a constant that the cached function keeps alive, so the first update
    copied the variable (found as one extra table-sized buffer)."""
    dtype = tf.as_dtype(dtype)
    return _filled(tf.TensorShape(partition_shape or shape), dtype, tf.constant(value, dtype))
