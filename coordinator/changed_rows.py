"""Which table rows changed, and when: a stamp per row (`changed_at`, int64) beside every table shard on its own ps,
written where the row changes, so a serving delta (coordinator/publish/deltas.py) reads only the rows changed since
a step.

A stamp is the table optimizer's step counter read *after* the change lands, taken by a maximum (a stamp never
moves back). So a change a reader missed (it landed after the reader read the row) carries a step at or after
the one the reader read before it began: reading "stamps at or after the step read at the start of the previous
read" never loses a change. Hashed tables (FusedTables, SeparateTables) are stamped by the table optimizer's
sparse apply (`StampedRows` of coordinator/row_stamps.py, mixed into coordinator/sparse.py's optimizers); dynamic
tables by their partitions (coordinator/dynamic/partition.py: under the partition's lock for kept updates, rows
given to ids and rows freed, after the mark for rows looked up). Stamps are not checkpointed: a restored run
starts them at 0 and publishes a full version first. Only runs that publish deltas make them (`track_changes`):
8 bytes a row on each ps and one maximum per update.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from coordinator.dynamic.layer import DynamicTables
from coordinator.row_stamps import STAMP_NAME
from coordinator.table_init import filled
from coordinator.tables import FusedTables, SeparateTables, table_layers


def step_clock(model) -> tf.Variable:
    """The step counter stamps are taken from: the table optimizer's (a model with tables), else the optimizer's."""
    embedding = getattr(model, "embedding_optimizer", None)
    return (embedding or model.optimizer).iterations


@dataclasses.dataclass(frozen=True)
class TrackedPart:
    """One shard of a table, on its ps: its rows `offset` .. `offset + rows` of the table's checkpoint key."""

    device: str
    offset: int
    rows: int
    shard: object  # the hashed table's shard variable, or the dynamic table's Partition


@dataclasses.dataclass(frozen=True)
class TrackedTable:
    """A table whose changed rows a delta carries: `variable` (the hashed table's variable, or the dynamic layer)
    and its parts; `dynamic` for a dynamic table."""

    variable: object
    parts: tuple[TrackedPart, ...]
    dynamic: bool


def track_changes(model, strategy=None) -> list[TrackedTable]:
    """Gives every table of `model` (a SparseDenseModel whose optimizers are built) its stamps, and its optimizer or
    partitions the step counter to stamp with; returns the tables. Call before the training step is traced."""
    strategy = strategy or tf.distribute.get_strategy()
    optimizer, tracked = getattr(model, "embedding_optimizer", None), []
    with strategy.scope():
        for layer in table_layers(model):
            if isinstance(layer, DynamicTables):
                parts, offset = [], 0
                for partition in layer.partitions:
                    partition.track_changes(step_clock(model))
                    parts.append(TrackedPart(partition.device, offset, partition.rows, partition))
                    offset += partition.rows
                tracked.append(TrackedTable(layer, tuple(parts), True))
            elif isinstance(layer, (FusedTables, SeparateTables)) and hasattr(optimizer, "stamp"):
                variables = [layer.table] if isinstance(layer, FusedTables) else list(layer.tables)
                tracked += [_stamped(variable, optimizer, strategy) for variable in variables]
    return tracked


def _stamped(variable, optimizer, strategy) -> TrackedTable:
    """A hashed table (a variable, or a ShardedVariable: one part per shard) with stamps beside each shard."""
    parts, offset = [], 0
    for shard in getattr(variable, "variables", [variable]):
        rows = int(shard.shape[0])
        with strategy.extended.colocate_vars_with(shard):
            stamps = tf.Variable(lambda rows=rows: filled([rows], tf.int64, 0), trainable=False, name=STAMP_NAME)
        optimizer.stamp(shard, stamps)
        parts.append(TrackedPart(shard.device, offset, rows, shard))
        offset += rows
    return TrackedTable(variable, tuple(parts), False)
