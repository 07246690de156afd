"""A partition's rows handed out and taken back: the rows freed by expiry first (a stack), then rows never used."""

from __future__ import annotations

import tensorflow as tf

from coordinator.table_init import filled


class RowAllocator:
    """Which of a partition's `rows` are free. Not safe on its own: call it only under the partition's lock, whose
    one holder at a time is what makes a row go to one id only."""

    def __init__(self, rows: int):
        self.rows = rows
        self.freed = tf.Variable(lambda: filled([rows], tf.int32, 0), trainable=False, name="freed_rows")
        self.freed_count = tf.Variable(tf.constant(0, tf.int32), trainable=False, name="freed_count")
        self.fresh = tf.Variable(tf.constant(0, tf.int32), trainable=False, name="first_unused_row")

    def take(self, count: tf.Tensor) -> tf.Tensor:
        """Up to `count` free rows (int64; fewer when the partition is full), now in use."""
        count = tf.cast(count, tf.int32)
        top = self.freed_count.read_value()
        from_freed = tf.minimum(count, top)
        reused = tf.gather(self.freed, tf.range(top - from_freed, top))
        first = self.fresh.read_value()
        from_fresh = tf.minimum(count - from_freed, self.rows - first)
        taken = [self.freed_count.assign_sub(from_freed), self.fresh.assign_add(from_fresh)]
        with tf.control_dependencies(taken):
            return tf.cast(tf.concat([reused, tf.range(first, first + from_fresh)], axis=0), tf.int64)

    def give_back(self, rows: tf.Tensor) -> tf.Operation:
        """Makes `rows` (int64, in use until now) free again."""
        top = self.freed_count.read_value()
        count = tf.size(rows, out_type=tf.int32)
        stored = self.freed.scatter_update(tf.IndexedSlices(tf.cast(rows, tf.int32), tf.range(top, top + count)))
        with tf.control_dependencies([stored]):
            return self.freed_count.assign_add(count).op

    def in_use(self) -> tf.Tensor:
        return tf.cast(self.fresh - self.freed_count, tf.int64)

    def restart(self, used: tf.Tensor) -> None:
        """After a restore: rows 0 to `used` - 1 in use, the rest never used."""
        self.freed_count.assign(0)
        self.fresh.assign(tf.cast(used, tf.int32))

    def nbytes(self) -> int:
        return 4 * self.rows + 8
