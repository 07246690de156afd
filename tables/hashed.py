"""Hashed tables as a kind (tables/table_kind.py): each id takes the row of its value modulo the table's rows,
fused into one variable or one variable per feature (fused.py); a delta reads a shard's changed rows with their
optimizer slots and stamps, the stamps written by the table optimizer's sparse apply (row_stamps.py); as exported,
a table is its variable, and a delta overwrites the rows it carries."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tables.bundle_rows import BundleRows
from tables.changed_rows import PartReader, TrackedPart, TrackedTable, block_counter, range_reader
from tables.fused import FusedTables, SeparateTables, hashed_rows, make_tables, rows_read_by_lookup
from tables.row_fields import CHANGED_AT, ROWS, VECTORS, field_key, slot_field
from tables.row_source import stand_ins
from tables.row_stamps import make_stamps
from tables.served_table import ServedTable
from tables.table_kind import TableKind, row_trip_bytes


class HashedKind(TableKind):
    name = "hashed"

    def build(self, options, features: int, dim: int, *, splits, name: str, serving: bool):
        return make_tables(options.rows_for(features), dim, fused=options.fused_tables,
                           deduplicate=options.deduplicate_ids, name=name)

    def saved_layers(self) -> dict[str, type]:
        return {"FusedTables": FusedTables, "SeparateTables": SeparateTables}

    def layers(self, model) -> list:
        return [layer for layer in model._flatten_layers(include_self=False)
                if isinstance(layer, (FusedTables, SeparateTables))]

    def traffic(self, layer, sample_ids, shards_of) -> list:
        rows = hashed_rows(sample_ids, layer.table_rows)
        if isinstance(layer, FusedTables):
            pairs = [(layer.table, (rows + layer.offsets).reshape(-1))]
        else:
            pairs = [(table, rows[:, k]) for k, table in enumerate(layer.tables)]
        found = []
        for table, ids in pairs:
            ids = np.unique(ids) if layer.deduplicate else ids
            first = 0
            for shard in shards_of(table):
                count = int(np.count_nonzero((ids >= first) & (ids < first + shard.shape[0])))
                first += shard.shape[0]
                found.append((shard.device, count, count * row_trip_bytes(shard, 2), None))
        return found

    def served(self, model) -> list:
        return [ServedVariable(variable) for variable in rows_read_by_lookup(model)]

    def track(self, layer, optimizer, strategy, clock_beside) -> list:
        if not hasattr(optimizer, "stamp"):
            return []
        variables = [layer.table] if isinstance(layer, FusedTables) else list(layer.tables)
        return [stamped(variable, optimizer, strategy, clock_beside) for variable in variables]


def stamped(variable, optimizer, strategy, clock_beside) -> "StampedVariable":
    """A hashed table (a variable, or a ShardedVariable: one part per shard) with stamps beside each shard."""
    parts, offset = [], 0
    for shard in getattr(variable, "variables", [variable]):
        rows, clock = int(shard.shape[0]), clock_beside(shard)
        with strategy.extended.colocate_vars_with(shard):
            stamps = make_stamps(rows)
        optimizer.stamp(shard, stamps, clock)
        parts.append(TrackedPart(shard.device, offset, rows, shard, clock))
        offset += rows
    return StampedVariable(variable, tuple(parts), optimizer)


class StampedVariable(TrackedTable):
    """A hashed table's variable: per changed row, its number, vector, optimizer slots and stamp."""

    def key(self, keys: dict) -> str:
        return keys[self.parts[0].shard.ref()]

    def row_variables(self) -> set:
        return {part.shard.ref() for part in self.parts}

    def _slots(self) -> list[str]:
        return list(self.optimizer.get_slot_names()) if self.optimizer is not None else []

    def fields(self) -> list[str]:
        return [ROWS, VECTORS, *(slot_field(name) for name in self._slots()), CHANGED_AT]

    def reader(self, part: TrackedPart) -> PartReader:
        shard, optimizer = part.shard, self.optimizer
        stamps = optimizer.stamps_of(shard)
        slots = [optimizer.get_slot(shard, name) for name in optimizer.get_slot_names()]

        def read(begin, end, since):
            with tf.device(part.device):
                local = tf.range(begin, end, dtype=tf.int64)
                picked = tf.boolean_mask(local, tf.gather(stamps, local) >= since)
                return [picked + part.offset, tf.gather(shard, picked), *[tf.gather(slot, picked) for slot in slots],
                        tf.gather(stamps, picked)]

        return PartReader(range_reader(read), block_counter(part, lambda: stamps), part.rows)

    def row_bytes(self) -> int:
        width = int(self.parts[0].shard.shape[1])
        return (1 + len(self._slots())) * width * 4 + 8 * 2


class ServedVariable(ServedTable):
    """A hashed table's variable as exported: a check reads the rows its lookups ask for, a delta overwrites rows."""

    def __init__(self, variable):
        self.variable = variable

    def weights(self) -> list:
        return [self.variable]

    def streamed(self, placed: set) -> bool:
        return self.variable.ref() in placed

    def stand_in(self, reader, keys: dict) -> BundleRows:
        return BundleRows(reader, keys[self.variable.ref()])

    def standing_in(self, stand_in):
        return stand_ins({self.variable.ref(): stand_in})

    def delta_key(self, keys: dict) -> str:
        return keys[self.variable.ref()]

    def delta_inputs(self, name: str) -> dict[str, tf.TensorSpec]:
        rows, vectors = field_key(name, ROWS), field_key(name, VECTORS)
        return {rows: tf.TensorSpec([None], tf.int64, name=rows),
                vectors: tf.TensorSpec([None, *self.variable.shape[1:]], self.variable.dtype, name=vectors)}

    def apply_delta(self, name: str, inputs: dict) -> list:
        return [self.variable.scatter_update(tf.IndexedSlices(inputs[field_key(name, VECTORS)],
                                                              inputs[field_key(name, ROWS)]))]
