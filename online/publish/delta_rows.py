"""The rows of a live table changed at or after a step, read on the table's own ps: first how many changed in each
block of a chunk's rows (one call per shard, its stamps gathered a block at a time, tables/changed_rows.py),
then the blocks that hold changed rows, as few reads as keep each within a chunk of changed rows: a `where` over
the range's stamps, then gathers of those rows only, so what crosses the wire and what the reader holds is a chunk
at most, and the ps reads no more than a block of stamps beside its rows (a whole read would copy them while
training writes). A few changed rows in a 13 M-row shard take two calls, not the 28 of reading it a chunk of rows
at a time.

A hashed table's shard gives, per changed row, its number, vector, optimizer slots and stamp; a dynamic table's
partition gives the fields its checkpoint keeps (tables/dynamic/checkpoint.py): number, held, id, last step,
vector, slots, stamp, read under the partition's lock in one function, so a row and its slots and stamps agree.
Row numbers are the table's (its checkpoint key's rows: a shard's offset added). A row changed between the count
and the read carries a stamp at or after the delta's read step: the next delta has it, this one may too.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import tensorflow as tf

from tables.changed_rows import TrackedPart, TrackedTable
from tables.dynamic.rows_io import changed_row_reader
from online.publish.delta_format import CHANGED_AT, HELD, IDS, LAST_SEEN, ROWS, VECTORS, slot_field

Read = Callable[[int, int, int], list[tf.Tensor]]  # (begin, end, from step) -> the fields, in fields() order
Count = Callable[[int, int], list[int]]  # (from step, block rows) -> changed rows per block of the part


@dataclasses.dataclass(frozen=True)
class PartReader:
    """Reads the changed rows of one part (`rows` rows, numbered within it)."""

    read: Read
    count: Count
    rows: int

    def ranges(self, since: int, chunk: int) -> list[tuple[int, int]]:
        """Row ranges to read: together every row stamped at or after `since`, each range about `chunk` changed
        rows at most."""
        return merged_ranges(self.count(since, chunk), chunk, self.rows)


def merged_ranges(counts: list[int], chunk: int, rows: int) -> list[tuple[int, int]]:
    """Ranges over consecutive blocks of `chunk` rows (`counts` changed rows in each) holding every block with a
    changed row, merged while their changed rows stay within `chunk`."""
    ranges, begin, end, total = [], None, 0, 0
    for block, count in enumerate(counts):
        if not count:
            continue
        if begin is not None and total + count > chunk:
            ranges.append((begin, end))
            begin = None
        if begin is None:
            begin, total = block * chunk, 0
        total, end = total + count, min((block + 1) * chunk, rows)
    return ranges + ([(begin, end)] if begin is not None else [])


def fields(table: TrackedTable, optimizer) -> list[str]:
    """The names of what a part's reader gives, in order."""
    slots = _slot_names(table, optimizer)
    middle = [HELD, IDS, LAST_SEEN] if table.dynamic else []
    return [ROWS, *middle, VECTORS, *(slot_field(name) for name in slots), CHANGED_AT]


def _slot_names(table: TrackedTable, optimizer) -> list[str]:
    if table.dynamic:
        return list(table.parts[0].shard.slots)
    return list(optimizer.get_slot_names()) if optimizer is not None else []


def reader(table: TrackedTable, part: TrackedPart, optimizer) -> PartReader:
    """The reader of `part`'s rows whose stamp is at or after a step."""
    if table.dynamic:
        return PartReader(_dynamic_reader(part), _counter(part, lambda: part.shard.changed_at, part.shard.lock),
                          part.rows)
    stamps = optimizer.stamps_of(part.shard)
    return PartReader(_hashed_reader(part, optimizer), _counter(part, lambda: stamps), part.rows)


def _counter(part: TrackedPart, stamps_of, lock=None) -> Count:
    """Counts `part`'s changed rows per block on its ps (under `lock`, shared, when given)."""

    def count(since, block):
        def counted():
            def in_block(index):  # gathered a block at a time: the stamps are never read whole (copied) here
                local = tf.range(index * block, tf.minimum((index + 1) * block, part.rows), dtype=tf.int64)
                return tf.reduce_sum(tf.cast(tf.gather(stamps_of(), local) >= since, tf.int32))

            blocks = (part.rows + block - 1) // block
            return tf.map_fn(in_block, tf.range(blocks), fn_output_signature=tf.int32, parallel_iterations=1)

        with tf.device(part.device):
            return counted() if lock is None else lock.execute(counted, exclusive_resource_access=False)

    count = traced_now(count, 2)
    return lambda since, block: count(tf.constant(since, tf.int64), tf.constant(block, tf.int64)).numpy().tolist()


def _hashed_reader(part: TrackedPart, optimizer) -> Read:
    shard = part.shard
    stamps = optimizer.stamps_of(shard)
    slots = [optimizer.get_slot(shard, name) for name in optimizer.get_slot_names()]

    def read(begin, end, since):
        with tf.device(part.device):
            local = tf.range(begin, end, dtype=tf.int64)
            picked = tf.boolean_mask(local, tf.gather(stamps, local) >= since)
            return [picked + part.offset, tf.gather(shard, picked), *[tf.gather(slot, picked) for slot in slots],
                    tf.gather(stamps, picked)]

    return _eager(read)


def _dynamic_reader(part: TrackedPart) -> Read:
    return _eager(changed_row_reader(part.shard, part.offset))


def traced_now(function, scalars: int):
    """`function` of int64 scalars, traced now (at set-up): one traced mid-run is first registered on every task of
    the cluster, and a frozen worker would hold it."""
    traced = tf.function(function, input_signature=[tf.TensorSpec([], tf.int64)] * scalars)
    traced.get_concrete_function()
    return traced


def _eager(read) -> Read:
    read = traced_now(read, 3)

    def call(begin: int, end: int, since: int) -> list[tf.Tensor]:
        return read(tf.constant(begin, tf.int64), tf.constant(end, tf.int64), tf.constant(since, tf.int64))
    return call


def row_bytes(table: TrackedTable, optimizer) -> int:
    """Bytes of one row as a reader gives it (number, flags and id, vector, slots, stamp)."""
    width = int(table.parts[0].shard.shard.shape[1] if table.dynamic else table.parts[0].shard.shape[1])
    vectors = (1 + len(_slot_names(table, optimizer))) * width * 4
    return vectors + 8 * 2 + (17 if table.dynamic else 0)
