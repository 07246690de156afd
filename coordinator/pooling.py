"""Categorical features of several values (a TFRecord schema's [n > 1] or variable-length ones) pooled by mean.

Such ids come ragged, [batch, features, None]. They are padded into rows of one id per feature, [batch x longest,
features], so any table layer (one id per feature and row) looks them up unchanged; the padding's vectors are
masked out of the mean, and a feature with no value gets a zero vector. A single value's mean is its vector.
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras


def table_ids(ids) -> tf.Tensor:
    """Ids as the tables look them up, [rows, features]: as they are, or ragged ids padded (with 0) into rows."""
    if not isinstance(ids, tf.RaggedTensor):
        return ids
    padded = ids.to_tensor(0)  # [batch, features, longest]
    return tf.reshape(tf.transpose(padded, [0, 2, 1]), [-1, tf.shape(padded)[1]])


class MeanPooled(tf_keras.layers.Wrapper):
    """Wraps a table layer: ragged ids [batch, features, None] -> the mean of each feature's vectors [batch,
    features, dim]; `features` is given, as a batch may come with that axis of unknown size (ParameterServerStrategy's
    per-worker datasets)."""

    def __init__(self, layer, features: int, **kwargs):
        super().__init__(layer, **kwargs)
        self.features = int(features)

    def get_config(self):
        return {**super().get_config(), "features": self.features}

    def call(self, ids):
        present = ids.with_flat_values(tf.ones_like(ids.flat_values, tf.float32)).to_tensor(0.0)
        batch, features, longest = tf.unstack(tf.shape(present))
        vectors = self.layer(table_ids(ids))  # [batch x longest, features, dim]
        dim = vectors.shape[-1]
        vectors = tf.reshape(vectors, [batch, longest, features, dim])
        total = tf.reduce_sum(vectors * tf.transpose(present, [0, 2, 1])[..., tf.newaxis], axis=1)
        pooled = tf.math.divide_no_nan(total, tf.reduce_sum(present, axis=2)[..., tf.newaxis])
        pooled.set_shape([None, self.features, dim])
        return pooled
