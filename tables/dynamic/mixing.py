"""Where an id goes: its partition and its admission-sketch cells, from 64-bit fingerprints (FarmHash) of its bytes.

A mixing hash, not the id modulo the partition count: the ids a data set gives may follow any pattern (small
integers, a salted hash, a sequence), and every partition should get the same share of them. The same id
always lands in the same cells, on any machine of the same byte order, in any run.
"""

from __future__ import annotations

import tensorflow as tf


def _fingerprints(rows: tf.Tensor) -> tf.Tensor:
    """One uint64 per row of an int64 tensor [n, k]: the FarmHash64 of the row's 8k bytes."""
    count = tf.shape(rows)[0]
    as_bytes = tf.reshape(tf.bitcast(rows, tf.uint8), [count, -1])
    return tf.reshape(tf.bitcast(tf.fingerprint(as_bytes), tf.uint64), [count])


def partition_of(ids: tf.Tensor, partitions: int) -> tf.Tensor:
    """The partition (int32, 0 to `partitions` - 1) of each int64 id of a vector."""
    if partitions == 1:
        return tf.zeros_like(ids, dtype=tf.int32)
    mixed = _fingerprints(tf.reshape(ids, [-1, 1]))
    return tf.cast(mixed % tf.constant(partitions, tf.uint64), tf.int32)


def sketch_cells(ids: tf.Tensor, depth: int, width: int) -> tf.Tensor:
    """For each id of a vector, one cell in each of `depth` rows of a count-min sketch `width` wide: [n, depth]
    int64 flat positions (row * width + column), each row hashed on its own (the id and the row number)."""
    rows = tf.range(depth, dtype=tf.int64)
    keyed = tf.stack([tf.broadcast_to(ids[:, tf.newaxis], [tf.size(ids), depth]),
                      tf.broadcast_to(rows[tf.newaxis, :], [tf.size(ids), depth])], axis=-1)
    columns = _fingerprints(tf.reshape(keyed, [-1, 2])) % tf.constant(width, tf.uint64)
    return tf.reshape(tf.cast(columns, tf.int64), [-1, depth]) + rows * width
