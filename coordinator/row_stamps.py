"""Row stamps: a table row's `changed_at` (int64), the step counter read after a change to the row landed, kept by
a maximum so it never moves back; what coordinator/changed_rows.py gives every table a run publishes deltas of."""

from __future__ import annotations

import tensorflow as tf

STAMP_NAME = "changed_at"


def now_after(changes: list, clock) -> tf.Tensor:
    """The step `clock` holds, read once every op of `changes` has run (int64)."""
    with tf.control_dependencies(changes):
        return tf.cast(tf.identity(clock), tf.int64)


def stamp_rows(stamps: tf.Variable, rows: tf.Tensor, now: tf.Tensor):
    """`stamps[rows] = max(stamps[rows], now)`."""
    rows = tf.reshape(tf.cast(rows, tf.int64), [-1])
    return stamps.scatter_max(tf.IndexedSlices(tf.fill(tf.shape(rows), now), rows))


class StampedRows:
    """An optimizer mixin: after a sparse update of a stamped variable (a hashed table's shard), the rows it changed
    take the step counter, read after the update, as their stamp."""

    def stamp(self, variable, stamps: tf.Variable) -> None:
        self.__dict__.setdefault("_row_stamps", {})[variable.ref()] = stamps  # a plain dict: not tracked

    def stamps_of(self, variable) -> tf.Variable | None:
        return self.__dict__.get("_row_stamps", {}).get(variable.ref())

    def _resource_apply_sparse_duplicate_indices(self, grad, handle, indices, **kwargs):
        applied = super()._resource_apply_sparse_duplicate_indices(grad, handle, indices, **kwargs)
        stamps = self.stamps_of(handle)
        if stamps is None:
            return applied
        return tf.group(applied, stamp_rows(stamps, indices, now_after([applied], self.iterations)))
