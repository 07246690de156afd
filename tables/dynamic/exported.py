"""A dynamic table as exported: per row of its capacity, the id holding it (and whether one does) and its vector, with
each feature's shared row, as plain weights, and an id -> row index built from them at the first lookup.

An exported model must predict with no cluster, from .h5 and .keras as well as a SavedModel, and be written a
chunk at a time: its weights are the checkpoint's per-row arrays as they are (tables/dynamic/checkpoint.py),
which an exporter streams without sorting or gathering anything. The index (a MutableHashTable) is built on the
first lookup from the rows held (`indexed` says whether it is); it can take new ids later, which is what an
update of a served model in place needs. An id the table does not hold reads its feature's shared row, as in
training. While a check stands an id stand-in in for the layer (tables/row_source.py), lookups go there.
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras

from tables.row_source import id_stand_in

STATE_ROWS = {"ids": "row_ids", "held": "row_held", "vectors": "row_vectors"}  # weight -> the checkpoint's key


class ServingTables(tf_keras.layers.Layer):
    """A DynamicTables layer as exported, for `capacity` rows of width `dim`: int64 ids [batch, features] -> rows
    (the same output as the trained layer, split along the last axis when `splits` is given)."""

    def __init__(self, capacity: int, dim: int, *, splits=None, **kwargs):
        super().__init__(**kwargs)
        self.capacity, self.dim = int(capacity), int(dim)
        self.splits = tuple(int(s) for s in splits) if splits else None

    def build(self, input_shape):
        self.features = int(input_shape[-1])
        zeros = tf_keras.initializers.Zeros()
        self.ids = self.add_weight(name="ids", shape=(self.capacity,), dtype=tf.int64, initializer=zeros,
                                   trainable=False)
        self.held = self.add_weight(name="held", shape=(self.capacity,), dtype=tf.bool, initializer=zeros,
                                    trainable=False)
        self.vectors = self.add_weight(name="vectors", shape=(self.capacity, self.dim), initializer=zeros)
        self.shared = self.add_weight(name="shared", shape=(self.features, self.dim), initializer=zeros)
        self.indexed = self.add_weight(name="indexed", shape=(), dtype=tf.int32, initializer=zeros, trainable=False)
        self.index = tf.lookup.experimental.MutableHashTable(tf.int64, tf.int64, default_value=-1)
        super().build(input_shape)

    skips_padding = True  # takes `present` (tables/pooling.py), as the trained layer does

    def call(self, ids, present=None):
        """Rows for `ids`; where `present` (bool, ids' shape) is False the position is padding and reads zeros."""
        flat = tf.reshape(tf.cast(ids, tf.int64), [-1])
        features = tf.tile(tf.range(self.features), tf.shape(ids)[:1])
        stand_in = id_stand_in(self)
        found, vectors = stand_in(flat) if stand_in is not None else self._lookup(flat)
        vectors = tf.where(found[:, tf.newaxis], vectors, tf.gather(self.shared, features))
        if present is not None:
            vectors = tf.where(tf.reshape(present, [-1, 1]), vectors, tf.zeros_like(vectors))
        vectors = tf.reshape(vectors, tf.concat([tf.shape(ids), [self.dim]], axis=0))
        vectors.set_shape(ids.shape.concatenate([self.dim]))
        return tf.split(vectors, self.splits, axis=-1) if self.splits else vectors

    def _lookup(self, flat) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.control_dependencies([self.ensure_indexed()]):
            rows = self.index.lookup(flat)
        return rows >= 0, tf.gather(self.vectors, tf.maximum(rows, 0))

    def ensure_indexed(self) -> tf.Tensor:
        """Builds the index from the rows held, once (a loaded model starts with an empty one)."""
        def build_index():
            held = tf.where(self.held)[:, 0]
            inserted = self.index.insert(tf.gather(self.ids, held), held)
            with tf.control_dependencies([inserted]):
                return self.indexed.assign(1)

        return tf.cond(tf.equal(self.indexed, 0), build_index, lambda: tf.identity(self.indexed))

    def reset_index(self) -> None:
        """Empties the index, to be built again from the weights at the next lookup (after they were set)."""
        self.index.remove(self.index.export()[0])
        self.indexed.assign(0)

    def get_config(self):
        return {**super().get_config(), "capacity": self.capacity, "dim": self.dim,
                "splits": list(self.splits) if self.splits else None}


def dynamic_tables(model) -> list[ServingTables]:
    return [layer for layer in model._flatten_layers(include_self=False) if isinstance(layer, ServingTables)]


def state_keys(layer: ServingTables, shared_key: str) -> dict:
    """The training checkpoint's key of each per-row weight of `layer` (by `ref()`), from its `shared` weight's
    key: the trained layer's state lies beside its shared rows."""
    prefix = shared_key.rsplit("/shared/", 1)[0] + "/state/.ATTRIBUTES/"
    return {getattr(layer, weight).ref(): prefix + key for weight, key in STATE_ROWS.items()}
