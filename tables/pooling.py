"""Categorical features of several values (a TFRecord schema's [n > 1] or variable-length ones) pooled by mean.

Such ids come ragged, [batch, features, None]. They are padded into rows of one id per feature, [batch x longest,
features], so any table layer (one id per feature and row) looks them up unchanged; the padding's vectors are
masked out of the mean, and a feature with no value gets a zero vector. A single value's mean is its vector. A
table layer that tells padding from ids (`skips_padding`: dynamic tables, where a looked-up id takes a row) is
also given where the padding is, so padding never takes a row.
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras


def table_ids(ids, features: int | None = None) -> tf.Tensor:
    """Ids as the tables look them up, [rows, features]: as they are, or ragged ids padded (with 0) into rows."""
    if not isinstance(ids, tf.RaggedTensor):
        return ids
    return _as_rows(ids.to_tensor(0), features)


def _as_rows(padded: tf.Tensor, features: int | None) -> tf.Tensor:
    """[batch, features, longest] -> [batch x longest, features]."""
    return tf.reshape(tf.transpose(padded, [0, 2, 1]), [-1, features or tf.shape(padded)[1]])


class MeanPooled(tf_keras.layers.Wrapper):
    """Wraps a table layer: ragged ids [batch, features, None] -> the mean of each feature's vectors [batch,
    features, dim]; `features` is given, as a batch may come with that axis of unknown size (ParameterServerStrategy's
    per-worker datasets); with `splits` (e.g. (1, 16)) the pooled vectors are split along their last axis."""

    def __init__(self, layer, features: int, splits=None, **kwargs):
        super().__init__(layer, **kwargs)
        self.features = int(features)
        self.splits = tuple(int(s) for s in splits) if splits else None

    def build(self, input_shape=None):
        if not self.layer.built:  # one id per feature and row: what the table layer is given
            self.layer.build(tf.TensorShape([None, self.features]))
        super().build(input_shape)

    def get_config(self):
        return {**super().get_config(), "features": self.features,
                "splits": list(self.splits) if self.splits else None}

    def call(self, ids):
        mask = ids.with_flat_values(tf.ones_like(ids.flat_values, tf.bool)).to_tensor(False)
        present = tf.cast(mask, tf.float32)  # [batch, features, longest]
        batch, features, longest = tf.unstack(tf.shape(present))
        rows = table_ids(ids, self.features)
        if getattr(self.layer, "skips_padding", False):
            vectors = self.layer(rows, present=_as_rows(mask, self.features))
        else:
            vectors = self.layer(rows)  # [batch x longest, features, dim]
        dim = vectors.shape[-1]
        vectors = tf.reshape(vectors, [batch, longest, features, dim])
        total = tf.reduce_sum(vectors * tf.transpose(present, [0, 2, 1])[..., tf.newaxis], axis=1)
        pooled = tf.math.divide_no_nan(total, tf.reduce_sum(present, axis=2)[..., tf.newaxis])
        pooled.set_shape([None, self.features, dim])
        return tf.split(pooled, self.splits, axis=-1) if self.splits else pooled
