"""A dynamic table in checkpoints, streamed: per row of its capacity, the id holding it (and whether one does), its
last step, vector and optimizer slots, a chunk of rows at a time (rows_io.py), so no process holds the table.

Keys under the layer's `state`: `row_held` [capacity] bool, `row_ids` and `row_last_seen` [capacity] int64,
`row_vectors` and `row_slot-<name>` [capacity, dim], each partition's rows a slice of them (partition by
partition, as its ps holds them); `counters` [partitions, 4]; the admission sketches' cells `sketch-<variable>`
(a slice per partition) and scalars (one per partition). A restore spreads the held ids over the partitions of
the current ps count (rows_io.Loader), whatever count wrote them; sketches come back into the same partitioning
only, else they restart. Checkpoints of earlier versions, which held the held ids concatenated (`ids`,
`last_seen` int32 or int64, `vectors`, `slot-<name>`), restore the same way.
"""

from __future__ import annotations

import sys
from typing import Iterator

import numpy as np
import tensorflow as tf
from tensorflow.python.checkpoint import tensor_callable

from tables.dynamic.partition import COUNTERS
from tables.dynamic.rows_io import Loader, RowChunk, cuts, row_reader
from tables.streaming.entries import SmallEntry
from tables.streaming.rows import RowGroup, RowSlice, chunk_rows, row_ranges

STATE = "state"  # the layer's attribute, hence the name of the keys' parent in a checkpoint
ROWS = ("row_held", "row_ids", "row_last_seen", "row_vectors")
OLD_ROWS = (None, "ids", "last_seen", "vectors")  # the concatenated form of earlier versions: every id held


class TableState(tf.__internal__.tracking.Trackable):
    """The checkpointed state of a DynamicTables layer (the layer's `state`), saved and restored through
    tables/streaming/checkpoint_io.py (`streamed_parts`, `restore_streamed`)."""

    def __init__(self, layer):
        self._layer = layer

    @property
    def _partitions(self):
        return self._layer.partitions

    def _names(self) -> list[str]:
        slots = [f"row_slot-{name}" for name in self._partitions[0].slots]
        return [*ROWS, *slots, "counters", *(f"sketch-{name}" for name, _ in _sketch_variables(self._partitions[0]))]

    def _serialize_to_tensors(self):
        """The names TensorFlow lists this state by (values are read only by a streamed save)."""
        def refuse():
            raise NotImplementedError("a dynamic table is saved through tables.streaming.checkpoint_io")

        return {name: tensor_callable.Callable(refuse, tf.int64, "/device:CPU:0") for name in self._names()}

    def _restore_from_tensors(self, restored):
        raise NotImplementedError("a dynamic table is restored through tables.streaming.checkpoint_io")

    def streamed_parts(self, keys: dict[str, str], chunk_bytes: int) -> tuple[list[SmallEntry], list[RowGroup]]:
        """What a streamed save writes: the counters and sketch scalars whole, the rows and sketch cells a chunk
        at a time, partition by partition."""
        partitions, capacity = self._partitions, self._layer.capacity
        dim = self._layer.dim
        small = [SmallEntry(keys["counters"], lambda: tf.stack([p.counters.read_value() for p in partitions]),
                            _no_restore)]
        groups, offset = [], 0
        for partition in partitions:
            shapes = [(capacity,), (capacity,), (capacity,), (capacity, dim)] + [(capacity, dim)] * len(partition.slots)
            dtypes = [tf.bool, tf.int64, tf.int64, partition.shard.dtype] + [s.dtype for s in partition.slots.values()]
            names = [*ROWS, *(f"row_slot-{name}" for name in partition.slots)]
            slices = [RowSlice(keys[n], shape, offset, dtype)
                      for n, shape, dtype in zip(names, shapes, dtypes, strict=True)]
            groups.append(RowGroup(slices, partition.rows, row_reader(partition), _no_write, partition.device))
            offset += partition.rows
        sketch_small, sketch_groups = _sketch_parts(partitions, keys)
        return small + sketch_small, groups + sketch_groups

    def restore_streamed(self, reader, prefix: str, chunk_bytes: int) -> None:
        """Loads the held ids of the checkpoint `reader` reads (this state's keys start with `prefix`)."""
        partitions = self._partitions
        new = reader.has(prefix + ROWS[0])
        names = ROWS if new else OLD_ROWS
        slot_keys = {name: prefix + ("row_slot-" if new else "slot-") + name for name in partitions[0].slots}
        source = _ChunkSource(reader, [None if n is None else prefix + n for n in names], slot_keys, partitions,
                              chunk_bytes)
        loader = Loader(partitions, cuts(source.chunks, partitions))
        loader.begin()
        for chunk in source.chunks():
            loader.add(chunk)
        counters = reader.whole(prefix + "counters").numpy() if reader.has(prefix + "counters") else np.zeros(
            [len(partitions), COUNTERS], np.int64)
        dropped = loader.end(_counters_for(counters, len(partitions)))
        if dropped:
            print(f"[{self._layer.name}] warning: {dropped} held ids left out of the restore: their partitions under "
                  "this ps count have fewer rows than ids (counted as turned away; raise training.embedding_capacity)",
                  file=sys.stderr)
        _restore_sketches(partitions, reader, prefix, chunk_bytes)


def _no_restore(value) -> None:
    """Counters come back with the rows (restore_streamed), not on their own."""


def _no_write(begin, end, values) -> None:
    raise NotImplementedError("a dynamic table's rows are loaded by restore_streamed")


class _ChunkSource:
    """Chunks of held rows from a checkpoint's row keys (`keys`: held flag or None when every row is held, ids,
    last steps, vectors), with each live slot from `slot_keys` (or its initial value, when not saved)."""

    def __init__(self, reader, keys: list, slot_keys: dict, partitions, chunk_bytes: int):
        self.reader, self.keys, self.partitions = reader, keys, partitions
        self.slot_keys = {name: key for name, key in slot_keys.items() if reader.has(key)}
        self.rows = reader.rows_of(keys[1]) if reader.has(keys[1]) else 0
        width = int(reader.shapes[keys[3]][1]) if self.rows else 1
        self.per_chunk = chunk_rows((3 + len(self.slot_keys)) * width * 4 + 17, chunk_bytes)

    def chunks(self) -> Iterator[RowChunk]:
        first = self.partitions[0]
        for begin, end in row_ranges(self.rows, self.per_chunk):
            read = {index: self.reader.rows(key, begin, end).numpy() for index, key in enumerate(self.keys)
                    if key is not None}
            held = read[0] if 0 in read else np.ones(end - begin, bool)
            slots = {name: (self.reader.rows(self.slot_keys[name], begin, end).numpy()[held]
                            if name in self.slot_keys else np.broadcast_to(
                                first.initial_slots[name], (int(held.sum()), read[3].shape[1])).copy())
                     for name in first.slots}
            yield RowChunk(read[1][held], read[2][held].astype(np.int64), read[3][held], slots)


def _counters_for(saved: np.ndarray, partitions: int) -> np.ndarray:
    """Each partition's counters: as saved for the same partitioning, else the totals on the first partition (a
    checkpoint from before misdirected updates were counted has 3 columns)."""
    saved = np.pad(saved, [[0, 0], [0, COUNTERS - saved.shape[1]]])
    if saved.shape[0] == partitions:
        return saved
    spread = np.zeros([partitions, COUNTERS], np.int64)
    spread[0] = saved.sum(axis=0)
    return spread


def _sketch_variables(partition) -> list[tuple[str, tf.Variable]]:
    sketch = getattr(partition, "sketch", None)
    if sketch is None:
        return []
    return sorted((name, value) for name, value in vars(sketch).items() if isinstance(value, tf.Variable))


def _sketch_parts(partitions, keys) -> tuple[list[SmallEntry], list[RowGroup]]:
    """Each sketch variable as one key: cells (rank 1) a slice per partition, scalars stacked."""
    small, groups = [], []
    variables = [_sketch_variables(p) for p in partitions]
    for position, (name, first) in enumerate(variables[0]):
        key = keys[f"sketch-{name}"]
        mine = [found[position][1] for found in variables]
        if first.shape.rank == 0:
            small.append(SmallEntry(key, lambda mine=mine: tf.stack([v.read_value() for v in mine]), _no_restore))
            continue
        total, offset = sum(int(v.shape[0]) for v in mine), 0
        for variable in mine:
            groups.append(RowGroup([RowSlice(key, (total,), offset, variable.dtype)], int(variable.shape[0]),
                                   _cells_reader(variable), _no_write, variable.device))
            offset += int(variable.shape[0])
    return small, groups


def _cells_reader(variable):
    def read(begin: int, end: int) -> list[tf.Tensor]:
        with tf.device(variable.device):
            return [tf.gather(variable, tf.range(begin, end, dtype=tf.int64))]
    return read


def _restore_sketches(partitions, reader, prefix: str, chunk_bytes: int) -> None:
    """Each sketch as saved, when the checkpoint's sketches have the same partitioning and widths; else cleared
    (a sketch only delays admission: starting it again is safe)."""
    variables = [_sketch_variables(p) for p in partitions]
    if not variables[0]:
        return
    by_name = [[found[position][1] for found in variables] for position in range(len(variables[0]))]
    shapes = {name: [len(partitions)] if mine[0].shape.rank == 0 else [sum(int(v.shape[0]) for v in mine)]
              for (name, _), mine in zip(variables[0], by_name, strict=True)}
    if not all(reader.has(prefix + f"sketch-{name}") and list(reader.shapes[prefix + f"sketch-{name}"]) == shape
               for name, shape in shapes.items()):
        for partition in partitions:
            partition.sketch.clear()
        return
    for (name, _), mine in zip(variables[0], by_name, strict=True):
        key = prefix + f"sketch-{name}"
        if mine[0].shape.rank == 0:
            stored = reader.whole(key)
            for number, variable in enumerate(mine):
                variable.assign(stored[number])
            continue
        offset = 0
        for variable in mine:
            rows = int(variable.shape[0])
            for begin, end in row_ranges(rows, chunk_rows(variable.dtype.size, chunk_bytes)):
                with tf.device(variable.device):
                    variable.scatter_update(tf.IndexedSlices(reader.rows(key, offset + begin, offset + end),
                                                             tf.range(begin, end, dtype=tf.int64)))
            offset += rows


def held_difference(layer, other) -> tuple[int, float]:
    """(ids `layer` holds, the largest difference between the two layers' rows, slots and last steps for them):
    infinite when they hold different ids. Both tables are read whole: for tests and small tables only."""
    mine, theirs = layer.snapshot(), other.snapshot()
    if mine.keys() != theirs.keys() or not np.array_equal(mine["ids"], theirs["ids"]):
        return len(mine["ids"]), float("inf")
    return len(mine["ids"]), max((float(np.abs(mine[name] - theirs[name]).max(initial=0.0)) for name in mine
                                  if name != "ids"), default=0.0)


def state_prefix(layer, keys: dict) -> str:
    """The prefix of DynamicTables `layer`'s state keys in a checkpoint, from `keys` (streaming.entries'
    `variable_keys`): its state lies beside its shared rows."""
    shared = getattr(layer.shared, "variables", [layer.shared])[0]
    return keys[shared.ref()].rsplit("/shared/", 1)[0] + f"/{STATE}/.ATTRIBUTES/"


def held_difference_streamed(layer, reader, prefix: str, chunk_bytes: int) -> tuple[int, float]:
    """(ids the checkpoint `reader` reads holds for `layer`, the largest difference between their rows, slots and
    last steps there and in `layer` now): infinite when the two hold different ids. Read a chunk at a time."""
    partitions = layer.partitions
    new = reader.has(prefix + ROWS[0])
    keys = [None if n is None else prefix + n for n in (ROWS if new else OLD_ROWS)]
    slot_keys = {name: prefix + ("row_slot-" if new else "slot-") + name for name in partitions[0].slots}
    source = _ChunkSource(reader, keys, slot_keys, partitions, chunk_bytes)
    count, largest = 0, 0.0
    for chunk in source.chunks():
        parts, rows = layer.locate(chunk.ids)
        if (rows < 0).any():
            return count + len(chunk.ids), float("inf")
        for number, partition in enumerate(partitions):
            mine = np.flatnonzero(parts == number)
            with tf.device(partition.device):
                at = tf.constant(rows[mine], tf.int64)
                live = [tf.gather(partition.last_seen, at), tf.gather(partition.shard, at),
                        *[tf.gather(partition.slots[name], at) for name in chunk.slots]]
            stored = [chunk.last_seen[mine], chunk.vectors[mine], *[rows_[mine] for rows_ in chunk.slots.values()]]
            for now, then in zip(live, stored, strict=True):
                largest = max(largest, float(np.abs(now.numpy().astype(np.float64) - then).max(initial=0.0)))
        count += len(chunk.ids)
    held = int(sum(partition.index.size().numpy() for partition in partitions))
    return count, largest if held == count else float("inf")
