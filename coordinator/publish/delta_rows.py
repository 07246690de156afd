"""The rows of a live table changed at or after a step, read on the table's own ps a chunk of rows at a time: a
`where` over the rows' stamps (coordinator/changed_rows.py), then gathers of those rows only, so what crosses the
wire and what the reader holds is the changed rows of one chunk.

A hashed table's shard gives, per changed row, its number, vector, optimizer slots and stamp; a dynamic table's
partition gives the fields its checkpoint keeps (coordinator/dynamic/checkpoint.py): number, held, id, last step,
vector, slots, stamp, read under the partition's lock in one function, so a row and its slots and stamps agree.
Row numbers are the table's (its checkpoint key's rows: a shard's offset added).
"""

from __future__ import annotations

from typing import Callable

import tensorflow as tf

from coordinator.changed_rows import TrackedPart, TrackedTable
from coordinator.dynamic.guard import is_held
from coordinator.publish.delta_format import CHANGED_AT, HELD, IDS, LAST_SEEN, ROWS, VECTORS, slot_field

Reader = Callable[[int, int, int], list[tf.Tensor]]  # (begin, end, from step) -> the fields, in fields() order


def fields(table: TrackedTable, optimizer) -> list[str]:
    """The names of what a part's reader gives, in order."""
    slots = _slot_names(table, optimizer)
    middle = [HELD, IDS, LAST_SEEN] if table.dynamic else []
    return [ROWS, *middle, VECTORS, *(slot_field(name) for name in slots), CHANGED_AT]


def _slot_names(table: TrackedTable, optimizer) -> list[str]:
    if table.dynamic:
        return list(table.parts[0].shard.slots)
    return list(optimizer.get_slot_names()) if optimizer is not None else []


def reader(table: TrackedTable, part: TrackedPart, optimizer) -> Reader:
    """Reads rows [begin, end) of `part` (numbered within it) whose stamp is at or after a step."""
    return _dynamic_reader(part) if table.dynamic else _hashed_reader(part, optimizer)


def _hashed_reader(part: TrackedPart, optimizer) -> Reader:
    shard = part.shard
    stamps = optimizer.stamps_of(shard)
    slots = [optimizer.get_slot(shard, name) for name in optimizer.get_slot_names()]

    @tf.function
    def read(begin, end, since):
        with tf.device(part.device):
            local = tf.range(begin, end, dtype=tf.int64)
            picked = tf.boolean_mask(local, tf.gather(stamps, local) >= since)
            return [picked + part.offset, tf.gather(shard, picked), *[tf.gather(slot, picked) for slot in slots],
                    tf.gather(stamps, picked)]

    return _eager(read)


def _dynamic_reader(part: TrackedPart) -> Reader:
    partition = part.shard

    @tf.function
    def read(begin, end, since):
        def under_lock():
            local = tf.range(begin, end, dtype=tf.int64)
            picked = tf.boolean_mask(local, tf.gather(partition.changed_at, local) >= since)
            return [picked + part.offset, is_held(tf.gather(partition.generation, picked)),
                    tf.gather(partition.owner, picked), tf.gather(partition.last_seen, picked),
                    tf.gather(partition.shard, picked),
                    *[tf.gather(slot, picked) for slot in partition.slots.values()],
                    tf.gather(partition.changed_at, picked)]

        with tf.device(part.device):
            return partition.lock.execute(under_lock, exclusive_resource_access=False)

    return _eager(read)


def _eager(read) -> Reader:
    def call(begin: int, end: int, since: int) -> list[tf.Tensor]:
        return read(tf.constant(begin, tf.int64), tf.constant(end, tf.int64), tf.constant(since, tf.int64))
    return call


def row_bytes(table: TrackedTable, optimizer) -> int:
    """Bytes of one row as a reader gives it (number, flags and id, vector, slots, stamp)."""
    width = int(table.parts[0].shard.shard.shape[1] if table.dynamic else table.parts[0].shard.shape[1])
    vectors = (1 + len(_slot_names(table, optimizer))) * width * 4
    return vectors + 8 * 2 + (17 if table.dynamic else 0)
