"""Row stamps: a table row's `changed_at` (int64), the step its ps's stamp clock held when a change to the row had
landed, kept by a maximum so it never moves back (-1: not changed since stamps began); what each kind's `track` gives
every table a run publishes deltas of (tables/changed_rows.py).

A stamp clock is a one-element int64 variable on each ps (read where the row lives: no trip to another ps in a
training step). The chief advances every clock to the optimizer step it has just read before each delta reads a
row (`advance`, a maximum: clocks never move back), so a change that lands after a delta read its row carries a
stamp at or after the step that delta read at its start.
"""

from __future__ import annotations

import tensorflow as tf

from tables.initializers import filled

STAMP_NAME, CLOCK_NAME = "changed_at", "stamp_clock"
NOT_CHANGED = -1


def make_stamps(rows: int) -> tf.Variable:
    """The stamps of `rows` rows (create beside them)."""
    return tf.Variable(lambda: filled([rows], tf.int64, NOT_CHANGED), trainable=False, name=STAMP_NAME)


def make_clock() -> tf.Variable:
    """A stamp clock (create on the ps whose rows it stamps)."""
    return tf.Variable(tf.zeros([1], tf.int64), trainable=False, name=CLOCK_NAME)


def now_after(changes: list, clock: tf.Variable) -> tf.Tensor:
    """The step `clock` holds, read once every op of `changes` has run (an int64 scalar)."""
    with tf.control_dependencies(changes):
        return tf.reshape(tf.identity(clock), [])


def stamp_rows(stamps: tf.Variable, rows: tf.Tensor, now: tf.Tensor):
    """`stamps[rows] = max(stamps[rows], now)`."""
    rows = tf.reshape(tf.cast(rows, tf.int64), [-1])
    return stamps.scatter_max(tf.IndexedSlices(tf.fill(tf.shape(rows), now), rows))


def advance(clock: tf.Variable, step: int) -> None:
    """`clock = max(clock, step)`, in one op on the clock's ps (two chief threads may advance at once)."""
    with tf.device(clock.device):
        clock.scatter_max(tf.IndexedSlices(tf.constant([step], tf.int64), tf.constant([0], tf.int64)))


class StampedRows:
    """An optimizer mixin: after a sparse update of a stamped variable (a hashed table's shard), the rows it changed
    take the stamp clock beside them, read after the update, as their stamp."""

    def stamp(self, variable, stamps: tf.Variable, clock: tf.Variable) -> None:
        self.__dict__.setdefault("_row_stamps", {})[variable.ref()] = (stamps, clock)  # a plain dict: not tracked

    def stamps_of(self, variable) -> tf.Variable | None:
        found = self.__dict__.get("_row_stamps", {}).get(variable.ref())
        return found and found[0]

    def _resource_apply_sparse_duplicate_indices(self, grad, handle, indices, **kwargs):
        applied = super()._resource_apply_sparse_duplicate_indices(grad, handle, indices, **kwargs)
        found = self.__dict__.get("_row_stamps", {}).get(handle.ref())
        if found is None:
            return applied
        stamps, clock = found
        return tf.group(applied, stamp_rows(stamps, indices, now_after([applied], clock)))
