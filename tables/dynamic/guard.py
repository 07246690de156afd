"""Updates that carry the generation of the rows they were looked up in, applied only to rows still at it.

Each row of a partition has a generation (int32): odd while an id holds the row, even while it is free, bumped
when the row changes hands (given to an id, freed by expiry, given out again by a restore). A training lookup
reads each row's generation with the row; the gradient of the rows it gathers carries them (`gather_carrying`:
its IndexedSlices' indices hold the row and, above bit 31, its generation), and the table optimizer (`GuardedRows`,
mixed into tables/sparse.py's) applies an update under the partition's lock to the rows whose generation is
still the one carried; the rest are dropped and counted as misdirected (the per-ps report). Rows change hands under
the same lock, so no update lands in a row that went to another id after its step looked it up, however slow the
step: nothing waits on workers, and a lost one holds no row back.
"""

from __future__ import annotations

import tensorflow as tf

ROW_BITS = 31  # a partition has fewer than 2^31 rows (embedding_capacity is at most INT32_MAX)
GENERATIONS = 2**31 - 1  # a generation's mask: it wraps within int32, keeping its parity (held odd, free even)


def next_generation(generation: tf.Tensor, steps: int = 1) -> tf.Tensor:
    """The generation `steps` hands later (int32, wrapping within GENERATIONS)."""
    return tf.cast(tf.bitwise.bitwise_and(tf.cast(generation, tf.int64) + steps, GENERATIONS), tf.int32)


def is_held(generation: tf.Tensor) -> tf.Tensor:
    return tf.equal(tf.bitwise.bitwise_and(generation, 1), 1)


def encode(rows: tf.Tensor, generations: tf.Tensor) -> tf.Tensor:
    return rows + tf.bitwise.left_shift(tf.cast(generations, tf.int64), ROW_BITS)


def decode(indices: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(rows, generations) of an update's encoded indices."""
    rows = tf.bitwise.bitwise_and(indices, 2**ROW_BITS - 1)
    return rows, tf.cast(tf.bitwise.right_shift(indices, ROW_BITS), tf.int32)


def gather_carrying(shard, rows: tf.Tensor, generations: tf.Tensor) -> tf.Tensor:
    """`tf.gather(shard, rows)` whose gradient's indices carry each row's generation (for GuardedRows only)."""
    @tf.custom_gradient
    def gather(rows):
        def gradient(upstream, variables=None):
            shape = tf.shape(shard, out_type=tf.int64)
            return None, [tf.IndexedSlices(upstream, encode(rows, generations), shape)]

        return tf.gather(shard, rows), gradient

    return gather(rows)


class GuardedRows:
    """An optimizer mixin: updates of a guarded variable (a dynamic table's shard, `guard`ed by its layer) go to
    its partition, which applies them to the rows still at the carried generation (Partition.apply_unmoved)."""

    def guard(self, variable, partition) -> None:
        self.__dict__.setdefault("_guarded_rows", {})[variable.ref()] = partition  # not tracked: a plain dict

    def _resource_apply_sparse_duplicate_indices(self, grad, handle, indices, **kwargs):
        partition = self.__dict__.get("_guarded_rows", {}).get(handle.ref())
        if partition is None:
            return super()._resource_apply_sparse_duplicate_indices(grad, handle, indices, **kwargs)
        rows, generations = decode(indices)
        return partition.apply_unmoved(grad, rows, generations, lambda values, kept: super(
            GuardedRows, self)._resource_apply_sparse_duplicate_indices(values, handle, kept, **kwargs))
