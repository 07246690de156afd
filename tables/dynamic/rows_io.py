"""A dynamic table's rows read and loaded a chunk at a time: what its checkpoint form (checkpoint.py) streams.

Reading: a partition's rows [begin, end) under its lock, in one function on its ps, so a row's id, held flag,
last step, vector and optimizer slots are read together (the flag from the row's generation: odd while an id
holds it). Loading: each chunk's held ids go to the partition their hash names under the current partitioning,
into its next free rows (rows 0, 1, ... of each partition; the same ps count gives the same contents, another
one spreads the ids again); when a partition is given more ids than it has rows, it keeps the most recently
seen (a histogram of their last steps finds the cut, a pass of its own) and counts the rest as turned away.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context

from tables.dynamic.guard import is_held, next_generation
from tables.dynamic.mixing import partition_of
from tables.dynamic.partition import COUNTERS, TURNED_AWAY

HISTOGRAM_BINS = 4096


@dataclasses.dataclass
class RowChunk:
    """Held rows of a chunk: their ids, last steps, vectors and optimizer slot rows (numpy)."""

    ids: np.ndarray
    last_seen: np.ndarray
    vectors: np.ndarray
    slots: dict[str, np.ndarray]

    def take(self, picked: np.ndarray) -> "RowChunk":
        return RowChunk(self.ids[picked], self.last_seen[picked], self.vectors[picked],
                        {name: rows[picked] for name, rows in self.slots.items()})


def row_reader(partition) -> Callable[[int, int], list[tf.Tensor]]:
    """Rows [begin, end) of `partition`: [held (bool), ids, last steps, vectors, each slot in its order]."""
    @tf.function
    def read(begin, end):
        with tf.device(partition.device):
            return partition.lock.execute(lambda: row_fields(partition, tf.range(begin, end, dtype=tf.int64)),
                                          exclusive_resource_access=False)

    return lambda begin, end: read(tf.constant(begin, tf.int64), tf.constant(end, tf.int64))


def changed_row_reader(partition, offset: int) -> Callable:
    """`read(begin, end, since)` (int64 scalars, for a tf.function): the rows of [begin, end) stamped at or after
    `since`, each as its number (`offset` added) then row_fields then its stamp."""
    def read(begin, end, since):
        def under_lock():
            local = tf.range(begin, end, dtype=tf.int64)
            picked = tf.boolean_mask(local, tf.gather(partition.changed_at, local) >= since)
            return [picked + offset, *row_fields(partition, picked), tf.gather(partition.changed_at, picked)]

        with tf.device(partition.device):
            return partition.lock.execute(under_lock, exclusive_resource_access=False)

    return read


def row_fields(partition, rows: tf.Tensor) -> list[tf.Tensor]:
    """What the checkpoint keeps of `partition`'s `rows` (call under its lock): held flags (from each row's
    generation: odd while an id holds it), ids, last steps, vectors, each slot in its order."""
    return [is_held(tf.gather(partition.generation, rows)), tf.gather(partition.owner, rows),
            tf.gather(partition.last_seen, rows), tf.gather(partition.shard, rows),
            *[tf.gather(slot, rows) for slot in partition.slots.values()]]


class Loader:
    """Fills the partitions of a layer from chunks of held rows; `begin`, `add` each chunk, `end`."""

    def __init__(self, partitions: list, keep: list[list[int]] | None = None):
        """`keep` (from `cuts`): per partition, [low, high, budget]: ids last seen at `high` or later are kept,
        those in [low, high) while the budget lasts, the older left out; None keeps every id that fits."""
        self.partitions, self.keep = partitions, keep
        self.next_row = [0] * len(partitions)
        self.left_out = [0] * len(partitions)
        self._load = [_chunk_loader(p) for p in partitions]

    def begin(self) -> None:
        for partition in self.partitions:
            with tf.device(partition.device):
                partition.index.remove(partition.index.export()[0])
                partition.last_seen.assign(tf.zeros([partition.rows], tf.int64))

    def add(self, chunk: RowChunk) -> None:
        owners = partition_of(tf.constant(chunk.ids, tf.int64), len(self.partitions)).numpy()
        for number, partition in enumerate(self.partitions):
            picked = np.flatnonzero(owners == number)
            if self.keep is not None:
                picked = self._kept(number, chunk.last_seen, picked)
            room = partition.rows - self.next_row[number]
            self.left_out[number] += max(0, len(picked) - room)  # none when `keep` made room
            picked = picked[:max(room, 0)]
            if len(picked):
                mine = chunk.take(picked)
                first = self.next_row[number]
                self._load[number](tf.constant(mine.ids), tf.constant(mine.last_seen, tf.int64),
                                   tf.constant(mine.vectors), [tf.constant(mine.slots[name])
                                                               for name in partition.slots],
                                   tf.constant(first, tf.int64))
                self.next_row[number] += len(picked)
        context.async_wait()  # remote loads are queued: without a wait, many chunks wait on the ps at once

    def _kept(self, number: int, last_seen: np.ndarray, picked: np.ndarray) -> np.ndarray:
        low, high, budget = self.keep[number]
        seen = last_seen[picked]
        inside = picked[(seen >= low) & (seen < high)][:max(budget, 0)]
        self.keep[number][2] = budget - len(inside)
        self.left_out[number] += int(np.sum(seen < high)) - len(inside)
        return np.sort(np.concatenate([picked[seen >= high], inside]))

    def end(self, counters: np.ndarray) -> int:
        """Marks the loaded rows held (a new generation each), frees the rest, sets each partition's counters
        (those left out counted as turned away); returns how many ids were left out."""
        for number, partition in enumerate(self.partitions):
            used = self.next_row[number]
            with tf.device(partition.device):
                generation = partition.generation.read_value()
                held = tf.range(partition.rows, dtype=tf.int64) < used
                odd = tf.bitwise.bitwise_or(generation, 1)  # held rows: odd, and another than before; free: even
                partition.generation.assign(tf.where(held, next_generation(odd, 2), tf.where(
                    is_held(generation), next_generation(generation), generation)))
            partition.allocator.restart(used)
            extra = np.zeros([COUNTERS], np.int64)
            extra[TURNED_AWAY] = self.left_out[number]
            partition.counters.assign(counters[number] + extra)
            if partition.expiry is not None:
                partition.expiry.restart()
        return sum(self.left_out)


def _chunk_loader(partition):
    @tf.function
    def load(ids, last_seen, vectors, slots, first):
        with tf.device(partition.device):
            rows = first + tf.range(tf.size(ids, out_type=tf.int64))
            writes = [partition.index.insert(ids, rows), partition.owner.scatter_update(tf.IndexedSlices(ids, rows)),
                      partition.last_seen.scatter_update(tf.IndexedSlices(last_seen, rows)),
                      partition.shard.scatter_update(tf.IndexedSlices(vectors, rows))]
            writes += [slot.scatter_update(tf.IndexedSlices(values, rows))
                       for slot, values in zip(partition.slots.values(), slots, strict=True)]
            with tf.control_dependencies(writes):
                return tf.constant(0)

    return load


def cuts(chunks: Callable[[], Iterator[RowChunk]], partitions: list) -> list[list[int]] | None:
    """Per partition under the current partitioning, which ids to keep so that the most recently seen fit (see
    Loader), or None when every partition has room: one pass counting, and, only if some partition has too
    many, one more building histograms of last steps."""
    count = len(partitions)
    totals, low, high = np.zeros(count, np.int64), np.full(count, np.iinfo(np.int64).max), np.zeros(count, np.int64)
    for chunk in chunks():
        owners = partition_of(tf.constant(chunk.ids, tf.int64), count).numpy()
        for number in range(count):
            seen = chunk.last_seen[owners == number]
            totals[number] += len(seen)
            if len(seen):
                low[number], high[number] = min(low[number], seen.min()), max(high[number], seen.max())
    rows = np.array([p.rows for p in partitions])
    if (totals <= rows).all():
        return None
    return _histogram_cuts(chunks, rows, totals, low, high)


def _histogram_cuts(chunks, rows, totals, low, high) -> list[list[int]]:
    count = len(rows)
    edges = [np.unique(np.linspace(low[n], high[n] + 1, HISTOGRAM_BINS + 1).astype(np.int64)) for n in range(count)]
    bins = [np.zeros(len(e) - 1, np.int64) for e in edges]
    for chunk in chunks():
        owners = partition_of(tf.constant(chunk.ids, tf.int64), count).numpy()
        for number in range(count):
            if totals[number] > rows[number]:
                bins[number] += np.histogram(chunk.last_seen[owners == number], edges[number])[0]
    kept = []
    for number in range(count):
        if totals[number] <= rows[number]:
            kept.append([np.iinfo(np.int64).min, np.iinfo(np.int64).min, 0])
            continue
        from_top = np.cumsum(bins[number][::-1])
        whole = int(np.searchsorted(from_top, rows[number], side="right"))  # top bins that fit entirely
        cut_bin = len(bins[number]) - 1 - whole  # the bin that fits in part: first come
        above = int(from_top[whole - 1]) if whole else 0
        kept.append([int(edges[number][cut_bin]), int(edges[number][cut_bin + 1]), int(rows[number] - above)])
    return kept
