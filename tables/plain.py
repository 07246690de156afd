"""A plain table as a kind (tables/table_kind.py): one variable that every feature shares, each id taking the row of
its value modulo the rows. Written to prove the seam: tests/test_deltas.py registers it, then trains, checkpoints,
restores, publishes and checks it with no other module changed; cluster.json does not offer it."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tf_keras

from tables.hashed import ServedVariable, StampedVariable, stamped
from tables.initializers import uniform_table
from tables.row_source import gather_rows
from tables.table_kind import TableKind, row_trip_bytes


class PlainTable(tf_keras.layers.Layer):
    """int64 ids [batch, features] -> rows [batch, features, dim] of one [rows, dim] variable."""

    def __init__(self, rows: int, dim: int, **kwargs):
        super().__init__(**kwargs)
        self.rows, self.dim = int(rows), int(dim)

    def build(self, input_shape):
        self.table = self.add_weight(name="table", shape=(self.rows, self.dim), initializer=uniform_table)
        super().build(input_shape)

    def call(self, ids):
        rows = gather_rows(self.table, tf.reshape(tf.math.floormod(tf.cast(ids, tf.int64), self.rows), [-1]))
        vectors = tf.reshape(rows, tf.concat([tf.shape(ids), [self.dim]], axis=0))
        vectors.set_shape(ids.shape.concatenate([self.dim]))
        return vectors

    def get_config(self):
        return {**super().get_config(), "rows": self.rows, "dim": self.dim}


class PlainKind(TableKind):
    name = "plain"

    def build(self, options, features: int, dim: int, *, splits, name: str, serving: bool):
        return PlainTable(sum(options.rows_for(features)), dim, name=name)

    def saved_layers(self) -> dict[str, type]:
        return {"PlainTable": PlainTable}

    def layers(self, model) -> list:
        return [layer for layer in model._flatten_layers(include_self=False) if isinstance(layer, PlainTable)]

    def traffic(self, layer, sample_ids, shards_of) -> list:
        rows = np.mod(sample_ids, layer.rows).reshape(-1)
        found, first = [], 0
        for shard in shards_of(layer.table):
            count = int(np.count_nonzero((rows >= first) & (rows < first + shard.shape[0])))
            first += shard.shape[0]
            found.append((shard.device, count, count * row_trip_bytes(shard, 2), None))
        return found

    def served(self, model) -> list:
        return [ServedVariable(layer.table) for layer in self.layers(model)]

    def track(self, layer, optimizer, strategy, clock_beside) -> list[StampedVariable]:
        return [stamped(layer.table, optimizer, strategy, clock_beside)] if hasattr(optimizer, "stamp") else []
