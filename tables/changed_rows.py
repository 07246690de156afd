"""Which table rows changed, and when: a stamp per row (`changed_at`, int64) beside every table shard on its own ps,
written where the row changes, so a serving delta (online/publish/deltas.py) reads only the rows changed since
a step.

A stamp is a step: what the stamp clock on the row's ps (tables/row_stamps.py) holds once the change has
landed, taken by a maximum (a stamp never moves back). The chief advances the clocks to the optimizer step before
each delta reads a row, so a change a delta missed (it landed after the delta read the row) carries a stamp at or
after the step that delta read: reading "stamps at or after the step the previous delta read" never loses a change.
Hashed tables (FusedTables, SeparateTables) are stamped by the table optimizer's sparse apply (`StampedRows` of
row_stamps.py, mixed into tables/sparse.py's optimizers); dynamic tables by their partitions
(tables/dynamic/partition.py: under the partition's lock for kept updates, rows given to ids and rows freed,
after the mark for rows looked up). Nothing in a training step reads another ps for it. Stamps are not
checkpointed: a restored run starts them again and publishes a full version first. Only runs that publish deltas
make them (`track_changes`): 8 bytes a row on each ps and one maximum per update.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from tables.dynamic.layer import DynamicTables
from tables.row_stamps import make_clock, make_stamps
from tables.fused import FusedTables, SeparateTables, table_layers


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
    shard: object  # the hashed table's shard variable, or the dynamic table's Partition
    clock: object  # the stamp clock of its ps


@dataclasses.dataclass(frozen=True)
class TrackedTable:
    """A table whose changed rows a delta carries: `variable` (the hashed table's variable, or the dynamic layer)
    and its parts; `dynamic` for a dynamic table."""

    variable: object
    parts: tuple[TrackedPart, ...]
    dynamic: bool


def track_changes(model, strategy=None) -> list[TrackedTable]:
    """Gives every table of `model` (a SparseDenseModel whose optimizers are built) its stamps, and its optimizer or
    partitions a stamp clock on each ps; returns the tables. Call before the training step is traced."""
    strategy = strategy or tf.distribute.get_strategy()
    optimizer, tracked, clocks = getattr(model, "embedding_optimizer", None), [], {}

    def clock_beside(variable):
        if variable.device not in clocks:
            with strategy.extended.colocate_vars_with(variable):
                clocks[variable.device] = make_clock()
        return clocks[variable.device]

    with strategy.scope():
        for layer in table_layers(model):
            if isinstance(layer, DynamicTables):
                parts, offset = [], 0
                for partition in layer.partitions:
                    clock = clock_beside(partition.shard)
                    partition.track_changes(clock)
                    parts.append(TrackedPart(partition.device, offset, partition.rows, partition, clock))
                    offset += partition.rows
                tracked.append(TrackedTable(layer, tuple(parts), True))
            elif isinstance(layer, (FusedTables, SeparateTables)) and hasattr(optimizer, "stamp"):
                variables = [layer.table] if isinstance(layer, FusedTables) else list(layer.tables)
                tracked += [_stamped(variable, optimizer, strategy, clock_beside) for variable in variables]
    return tracked


def _stamped(variable, optimizer, strategy, clock_beside) -> TrackedTable:
    """A hashed table (a variable, or a ShardedVariable: one part per shard) with stamps beside each shard."""
    parts, offset = [], 0
    for shard in getattr(variable, "variables", [variable]):
        rows, clock = int(shard.shape[0]), clock_beside(shard)
        with strategy.extended.colocate_vars_with(shard):
            stamps = make_stamps(rows)
        optimizer.stamp(shard, stamps, clock)
        parts.append(TrackedPart(shard.device, offset, rows, shard, clock))
        offset += rows
    return TrackedTable(variable, tuple(parts), False)
