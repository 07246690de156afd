"""A partition's rows handed out and taken back: rows never used first, then freed rows, first in first out.

Freed rows queue in a ring (a quarantine): a row goes back to an id only after every row freed before it and every
never-used row, as late as the partition allows, so few updates still in flight for its last id meet it (those
that do are dropped by the generation check: tables/dynamic/guard.py).
"""

from __future__ import annotations

import tensorflow as tf

from tables.initializers import filled


class RowAllocator:
    """Which of a partition's `rows` are free. Not safe on its own: call it only under the partition's lock, whose
    one holder at a time is what makes a row go to one id only."""

    def __init__(self, rows: int):
        self.rows = rows
        self.freed = tf.Variable(lambda: filled([rows], tf.int32, 0), trainable=False, name="freed_rows")
        # rows freed and taken back since the run began (the ring's tail and head; int64: they never wrap)
        self.freed_total = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="freed_total")
        self.reused_total = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="reused_total")
        self.fresh = tf.Variable(tf.constant(0, tf.int32), trainable=False, name="first_unused_row")

    def take(self, count: tf.Tensor) -> tf.Tensor:
        """Up to `count` free rows (int64; fewer when the partition is full), now in use."""
        count = tf.cast(count, tf.int64)
        first = tf.cast(self.fresh.read_value(), tf.int64)
        from_fresh = tf.minimum(count, self.rows - first)
        head = self.reused_total.read_value()
        from_freed = tf.minimum(count - from_fresh, self.freed_total - head)
        reused = tf.gather(self.freed, (head + tf.range(from_freed)) % self.rows)
        taken = [self.reused_total.assign_add(from_freed), self.fresh.assign_add(tf.cast(from_fresh, tf.int32))]
        with tf.control_dependencies(taken):
            return tf.concat([tf.range(first, first + from_fresh), tf.cast(reused, tf.int64)], axis=0)

    def give_back(self, rows: tf.Tensor) -> tf.Operation:
        """Makes `rows` (int64, in use until now) free again, at the end of the queue."""
        tail = self.freed_total.read_value()
        count = tf.size(rows, out_type=tf.int64)
        stored = self.freed.scatter_update(tf.IndexedSlices(tf.cast(rows, tf.int32), (tail + tf.range(count)) %
                                                            self.rows))
        with tf.control_dependencies([stored]):
            return self.freed_total.assign_add(count).op

    def in_use(self) -> tf.Tensor:
        return tf.cast(self.fresh, tf.int64) - (self.freed_total - self.reused_total)

    def restart(self, used: tf.Tensor) -> None:
        """After a restore: rows 0 to `used` - 1 in use, the rest never used."""
        self.freed_total.assign(0)
        self.reused_total.assign(0)
        self.fresh.assign(tf.cast(used, tf.int32))

    def nbytes(self) -> int:
        return 4 * self.rows + 8 + 8 + 4
