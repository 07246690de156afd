"""What an exported model looks dynamic-table ids up in: the held ids, sorted, beside their rows, as plain weights.

An exported model must predict with no cluster, from .h5 and .keras as well as a SavedModel. Keras saves
weights, not hash tables (a MutableHashTable would be lost from .h5 and .keras), and a StaticHashTable keeps its
keys as constants in the graph (2 GB at most). So the export holds the ids as a sorted int64 weight and finds
each id by binary search (`tf.searchsorted`): every format carries it, it costs 8 bytes per id, and an id the
table did not hold reads its feature's shared row, as it does in training.
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras


class ServingTables(tf_keras.layers.Layer):
    """A DynamicTables layer frozen for inference: `size` held ids [batch, features] -> rows (same output)."""

    skips_padding = True  # takes `present` as DynamicTables does (coordinator/pooling.py)

    def __init__(self, size: int, dim: int, *, splits=None, **kwargs):
        super().__init__(**kwargs)
        self.size, self.dim = int(size), int(dim)
        self.splits = tuple(int(s) for s in splits) if splits else None

    def build(self, input_shape):
        self.features = int(input_shape[-1])
        zeros = tf_keras.initializers.Zeros()
        self.ids = self.add_weight(name="ids", shape=(max(self.size, 1),), dtype=tf.int64, initializer=zeros,
                                   trainable=False)
        self.vectors = self.add_weight(name="vectors", shape=(max(self.size, 1), self.dim), initializer=zeros)
        self.shared = self.add_weight(name="shared", shape=(self.features, self.dim), initializer=zeros)
        super().build(input_shape)

    def call(self, ids, present=None):  # padding (not `present`) reads some row: the pooling masks it out
        flat = tf.reshape(tf.cast(ids, tf.int64), [-1])
        positions = tf.minimum(tf.searchsorted(self.ids[tf.newaxis], flat[tf.newaxis], out_type=tf.int64)[0],
                               max(self.size, 1) - 1)
        found = tf.equal(tf.gather(self.ids, positions), flat) & (self.size > 0)
        features = tf.tile(tf.range(self.features), tf.shape(ids)[:1])
        vectors = tf.where(found[:, tf.newaxis], tf.gather(self.vectors, positions),
                           tf.gather(self.shared, features))
        vectors = tf.reshape(vectors, tf.concat([tf.shape(ids), [self.dim]], axis=0))
        vectors.set_shape(ids.shape.concatenate([self.dim]))
        return tf.split(vectors, self.splits, axis=-1) if self.splits else vectors

    def get_config(self):
        return {**super().get_config(), "size": self.size, "dim": self.dim,
                "splits": list(self.splits) if self.splits else None}


def serving_twin(layer) -> ServingTables:
    """A ServingTables holding what DynamicTables `layer` holds now (built, with its weights set)."""
    held = layer.snapshot()
    ids, vectors = held["ids"], held["vectors"]
    twin = ServingTables(len(ids), layer.dim, splits=layer.splits, name=layer.name)
    twin.build(tf.TensorShape([None, layer.features]))
    if len(ids):
        twin.ids.assign(ids)
        twin.vectors.assign(vectors)
    twin.shared.assign(layer.shared)
    return twin
