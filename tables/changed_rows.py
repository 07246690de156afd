"""Which table rows changed, and when: a stamp per row (`changed_at`, int64) beside every table shard on its own ps,
written where the row changes, so a serving delta (online/publish/deltas.py) reads only the rows changed since
a step.

A stamp is a step: what the stamp clock on the row's ps (tables/row_stamps.py) holds once the change has
landed, taken by a maximum (a stamp never moves back). The chief advances the clocks to the optimizer step before
each delta reads a row, so a change a delta missed (it landed after the delta read the row) carries a stamp at or
after the step that delta read: reading "stamps at or after the step the previous delta read" never loses a change.
Each kind of table stamps its own rows and reads them back (its `track`, tables/table_kind.py): hashed tables by
the table optimizer's sparse apply (`StampedRows` of row_stamps.py, mixed into tables/sparse.py's optimizers),
dynamic tables by their partitions (under the partition's lock). Nothing in a training step reads another ps for
it. Stamps are not checkpointed: a restored run starts them again and publishes a full version first. Only runs
that publish deltas make them (`kinds.track_changes`): 8 bytes a row on each ps and one maximum per update.

Reading, on the table's own ps: first how many rows changed in each block of a chunk's rows (one call per shard,
its stamps gathered a block at a time), then the blocks that hold changed rows, as few reads as keep each within a
chunk of changed rows, so what crosses the wire and what the reader holds is a chunk at most. A few changed rows in
a 13 M-row shard take two calls, not the 28 of reading it a chunk of rows at a time. Row numbers are the table's
(its checkpoint key's rows: a shard's offset added). A row changed between the count and the read carries a stamp
at or after the delta's read step: the next delta has it, this one may too.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Callable

import tensorflow as tf

Read = Callable[[int, int, int], list[tf.Tensor]]  # (begin, end, from step) -> the fields, in fields() order
Count = Callable[[int, int], list[int]]  # (from step, block rows) -> changed rows per block of the part


def step_clock(model) -> tf.Variable:
    """The step counter stamps count in: the table optimizer's (a model with tables), else the optimizer's."""
    embedding = getattr(model, "embedding_optimizer", None)
    return (embedding or model.optimizer).iterations


@dataclasses.dataclass(frozen=True)
class TrackedPart:
    """One shard of a table, on its ps: its rows `offset` .. `offset + rows` of the table's checkpoint key."""

    device: str
    offset: int
    rows: int
    shard: object  # what the kind reads the part's rows from (a variable, a dynamic table's Partition)
    clock: object  # the stamp clock of its ps


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


@dataclasses.dataclass(frozen=True)
class TrackedTable(abc.ABC):
    """A table whose changed rows a delta carries, as its kind reads them: `variable` (what its checkpoint key
    comes from), its parts, and the table optimizer."""

    variable: object
    parts: tuple[TrackedPart, ...]
    optimizer: object
    restore_moves_rows = False  # whether a restore lays rows out other than the checkpoint did

    @abc.abstractmethod
    def key(self, keys: dict) -> str:
        """The table's checkpoint key (or key prefix), from `keys` (streaming.entries' `variable_keys`)."""

    @abc.abstractmethod
    def fields(self) -> list[str]:
        """The names (tables/row_fields.py) of what a part's reader gives, in order."""

    @abc.abstractmethod
    def reader(self, part: TrackedPart) -> PartReader:
        """The reader of `part`'s rows whose stamp is at or after a step (traced now: call at set-up)."""

    @abc.abstractmethod
    def row_bytes(self) -> int:
        """Bytes of one row as a reader gives it."""

    def row_variables(self) -> set:
        """`ref()`s of the variables whose values a delta carries as this table's rows (not as dense weights)."""
        return set()


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


def block_counter(part: TrackedPart, stamps_of: Callable, lock=None) -> Count:
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


def traced_now(function, scalars: int):
    """`function` of int64 scalars, traced now (at set-up): one traced mid-run is first registered on every task of
    the cluster, and a frozen worker would hold it."""
    traced = tf.function(function, input_signature=[tf.TensorSpec([], tf.int64)] * scalars)
    traced.get_concrete_function()
    return traced


def range_reader(read) -> Read:
    """`read(begin, end, since)` of int64 scalars, traced now, called with Python ints."""
    read = traced_now(read, 3)

    def call(begin: int, end: int, since: int) -> list[tf.Tensor]:
        return read(tf.constant(begin, tf.int64), tf.constant(end, tf.int64), tf.constant(since, tf.int64))
    return call
