"""Dynamic tables as a kind (tables/table_kind.py): rows given to ids as they come (layer.py), one row holding all of
an id's parts; a delta reads a partition's changed rows as its checkpoint keeps them (rows_io.py), and a restore
may lay the ids out in other rows than the checkpoint's."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from cluster import dynamic_table_memory as memory
from tables.changed_rows import PartReader, TrackedPart, TrackedTable, block_counter, range_reader
from tables.dynamic import checkpoint
from tables.dynamic.exported import ServingTables, dynamic_tables
from tables.dynamic.layer import DynamicTables
from tables.dynamic.mixing import partition_of
from tables.dynamic.report import TableReport
from tables.dynamic.served import ServedDynamic
from tables.dynamic.rows_io import changed_row_reader
from tables.memory import PsTables
from tables.row_fields import CHANGED_AT, HELD, IDS, LAST_SEEN, ROWS, VECTORS, slot_field
from tables.table_kind import TableKind, row_trip_bytes


class DynamicKind(TableKind):
    name = "dynamic"

    def build(self, options, features: int, dim: int, *, splits, name: str, serving: bool):
        if serving:
            return ServingTables(options.embedding_capacity, dim, splits=splits, name=name)
        return DynamicTables(options.embedding_capacity, dim, admit_after=options.admit_after,
                             admit_window_steps=options.admit_window_steps,
                             halve_by_load=options.admission_halving == "by_load",
                             expire_after_steps=options.expire_after_steps, expire_after_s=options.expire_after_s,
                             deduplicate=options.deduplicate_ids, splits=splits, name=name)

    def saved_layers(self) -> dict[str, type]:
        return {"ServingTables": ServingTables}

    def joins_parts(self) -> bool:
        return True

    def layers(self, model) -> list:
        return [layer for layer in model._flatten_layers(include_self=False) if isinstance(layer, DynamicTables)]

    def traffic(self, layer, sample_ids, shards_of) -> list:
        """Each id is looked up on the partition its hash names (the index sends its row number back beside the
        row); the partitions' bookkeeping is held beside their rows."""
        shards = shards_of(layer.rows_variable)
        ids = np.unique(sample_ids) if layer.deduplicate else sample_ids.reshape(-1)
        owners = partition_of(tf.constant(ids, tf.int64), len(shards)).numpy()
        found = []
        for number, shard in enumerate(shards):
            count = int(np.count_nonzero(owners == number))
            found.append((shard.device, count, count * row_trip_bytes(shard, 3), None))
        return found + [(partition.device, 0, 0, partition.nbytes()) for partition in layer.partitions]

    def bind(self, layer, optimizer) -> None:
        layer.bind_optimizer(optimizer)

    def served(self, model) -> list:
        return [ServedDynamic(layer) for layer in dynamic_tables(model)]

    def track(self, layer, optimizer, strategy, clock_beside) -> list:
        parts, offset = [], 0
        for partition in layer.partitions:
            clock = clock_beside(partition.shard)
            partition.track_changes(clock)
            parts.append(TrackedPart(partition.device, offset, partition.rows, partition, clock))
            offset += partition.rows
        return [TrackedPartitions(layer, tuple(parts), optimizer)]

    def report(self, layers: list):
        return TableReport(layers) if layers else None

    def ps_account(self, layer, shards_of, slots_per_row: int) -> list:
        found = []
        for shard in shards_of(layer.rows_variable):
            ps = int(shard.device.split("task:")[1].split("/")[0])
            rows, values = int(shard.shape[0]), int(np.prod(shard.shape))
            found.append((ps, PsTables(rows=rows, row_bytes=values * shard.dtype.size,
                                       slot_bytes=slots_per_row * values * shard.dtype.size,
                                       index_bytes=memory.index_bytes(rows),
                                       bookkeeping_bytes=memory.bookkeeping_bytes(rows, layer.admit_after))))
        return found

    def earlier_form(self, checkpoint_keys) -> bool:
        return any(key.endswith(f"/{checkpoint.STATE}/.ATTRIBUTES/ids") for key in checkpoint_keys)

    def check_restored(self, layer, reader, keys: dict, chunk_bytes: int) -> tuple[str, float] | None:
        ids, differ = checkpoint.held_difference_streamed(layer, reader, checkpoint.state_prefix(layer, keys),
                                                          chunk_bytes)
        return f"{ids} ids spread again over {len(layer.partitions)} partitions; their rows, slots and last steps", \
            differ


class TrackedPartitions(TrackedTable):
    """A dynamic table's partitions: per changed row, its number, held flag, id, last step, vector, optimizer slots
    and stamp, read under the partition's lock in one function, so a row and its slots and stamps agree."""

    restore_moves_rows = True

    def key(self, keys: dict) -> str:
        return checkpoint.state_prefix(self.variable, keys)

    def _slots(self) -> list[str]:
        return list(self.parts[0].shard.slots)

    def fields(self) -> list[str]:
        return [ROWS, HELD, IDS, LAST_SEEN, VECTORS, *(slot_field(name) for name in self._slots()), CHANGED_AT]

    def reader(self, part: TrackedPart) -> PartReader:
        partition = part.shard
        return PartReader(range_reader(changed_row_reader(partition, part.offset)),
                          block_counter(part, lambda: partition.changed_at, partition.lock), part.rows)

    def row_bytes(self) -> int:
        width = int(self.parts[0].shard.shard.shape[1])
        return (1 + len(self._slots())) * width * 4 + 8 * 2 + 17
