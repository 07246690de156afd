"""Embedding tables for the recommendation models: all tables fused into one variable, or one variable per table.

Ids come in as 64-bit values, one per categorical feature, keyed by feature and value (the data's hashing, with no
modulo): a hashed table takes each id modulo its rows, so many ids may share one row. Both create their
variables with a callable initializer, so under ParameterServerStrategy each shard is
initialised on its own ps (no initial value is built on the chief: a graph holds at most 2 GB) and the
variable partitioner splits them. A lookup on a split variable gathers on each ps and only the looked-up rows
cross the wire; ids are de-duplicated first (`tf.unique`) so a hot id moves once per step, not once per use.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tf_keras

from tables.row_source import gather_rows
from tables.initializers import uniform_table


def _lookup(table, ids: tf.Tensor, deduplicate: bool, dim: int) -> tf.Tensor:
    """Rows of `table` for an int64 id tensor of any shape; with `deduplicate` each distinct id is gathered once."""
    flat = tf.reshape(ids, [-1])
    if deduplicate:
        unique_ids, positions = tf.unique(flat)
        rows = tf.gather(gather_rows(table, unique_ids), positions)
    else:
        rows = gather_rows(table, flat)
    rows = tf.reshape(rows, tf.concat([tf.shape(ids), [dim]], axis=0))
    rows.set_shape(ids.shape.concatenate([dim]))
    return rows


class FusedTables(tf_keras.layers.Layer):
    """Every categorical feature's table as a row range of one [sum(table_rows), dim] variable.

    One lookup per step (split by the partitioner into one gather per ps) instead of one per table, and the
    variable is split evenly by rows, so each ps holds the same bytes whatever the tables' sizes.
    Input: int64 ids [batch, tables] (any 64-bit values). Output: [batch, tables, dim].
    """

    def __init__(self, table_rows, dim: int, *, deduplicate: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.table_rows, self.dim, self.deduplicate = tuple(int(r) for r in table_rows), int(dim), deduplicate
        self.offsets = np.concatenate([[0], np.cumsum(self.table_rows)[:-1]]).astype(np.int64)

    def build(self, input_shape):
        self.table = self.add_weight(name="table", shape=(sum(self.table_rows), self.dim), dtype=tf.float32,
                                     initializer=uniform_table)
        super().build(input_shape)

    def call(self, ids):
        return _lookup(self.table, hashed_rows(ids, self.table_rows) + self.offsets, self.deduplicate, self.dim)

    def get_config(self):
        return {**super().get_config(), "table_rows": list(self.table_rows), "dim": self.dim,
                "deduplicate": self.deduplicate}


class SeparateTables(tf_keras.layers.Layer):
    """One variable per categorical feature, each looked up on its own (the straightforward build, for comparison)."""

    def __init__(self, table_rows, dim: int, *, deduplicate: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.table_rows, self.dim, self.deduplicate = tuple(int(r) for r in table_rows), int(dim), deduplicate

    def build(self, input_shape):
        self.tables = [self.add_weight(name=f"table_{k}", shape=(rows, self.dim), dtype=tf.float32,
                                       initializer=uniform_table) for k, rows in enumerate(self.table_rows)]
        super().build(input_shape)

    def call(self, ids):
        rows = hashed_rows(ids, self.table_rows)
        looked_up = [_lookup(table, rows[:, k], self.deduplicate, self.dim) for k, table in enumerate(self.tables)]
        return tf.stack(looked_up, axis=1)

    def get_config(self):
        return {**super().get_config(), "table_rows": list(self.table_rows), "dim": self.dim,
                "deduplicate": self.deduplicate}


def hashed_rows(ids, table_rows) -> tf.Tensor | np.ndarray:
    """Each feature's 64-bit ids [..., tables] as a row of its table: the id modulo that table's rows."""
    if isinstance(ids, np.ndarray):
        return np.mod(ids, np.asarray(table_rows, dtype=np.int64))
    return tf.math.floormod(tf.cast(ids, tf.int64), tf.constant(table_rows, tf.int64))


def rows_read_by_lookup(model: tf_keras.Model) -> list:
    """The table variables of `model` that its lookups read a row at a time (through row_source.gather_rows)."""
    return [weight for layer in model._flatten_layers(include_self=False)
            if isinstance(layer, (FusedTables, SeparateTables)) for weight in layer.weights]


def make_tables(table_rows, dim: int, *, fused: bool, deduplicate: bool, name: str) -> tf_keras.layers.Layer:
    """The table layer the options choose."""
    kind = FusedTables if fused else SeparateTables
    return kind(table_rows, dim, deduplicate=deduplicate, name=name)
