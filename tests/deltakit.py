"""Deltas replayed on the checkpoint a version came from, and a live model's tables read whole, as numpy arrays: what
the delta tests compare bit for bit (small tables only)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tensorflow as tf

from tables.dynamic.guard import is_held
from tables.dynamic.partition import Partition
from online.publish import delta_format as names

DYNAMIC_BASE = {names.HELD: "row_held", names.IDS: "row_ids", names.LAST_SEEN: "row_last_seen",
                names.VECTORS: "row_vectors"}


def live_tables(model, tracked) -> dict[str, dict[str, np.ndarray]]:
    """Every tracked table of `model` as the delta fields name them, read whole: {table: {field: array}}."""
    from online.publish.deltas import DeltaSource

    source, optimizer = DeltaSource(model, tracked), model.embedding_optimizer
    found = {}
    for table, named in zip(tracked, source.tables, strict=True):
        parts = [_live_part(table, part, optimizer) for part in table.parts]
        found[named.name] = {field: np.concatenate([part[field] for part in parts]) for field in parts[0]}
    return found


def _live_part(table, part, optimizer) -> dict[str, np.ndarray]:
    rows = np.arange(part.rows) + part.offset
    if isinstance(part.shard, Partition):  # a dynamic table's
        partition = part.shard
        fields = {names.ROWS: rows, names.HELD: is_held(partition.generation).numpy(),
                  names.IDS: partition.owner.numpy(), names.LAST_SEEN: partition.last_seen.numpy(),
                  names.VECTORS: partition.shard.numpy()}
        fields.update({names.slot_field(name): slot.numpy() for name, slot in partition.slots.items()})
        return {**fields, names.CHANGED_AT: partition.changed_at.numpy()}
    fields = {names.ROWS: rows, names.VECTORS: part.shard.numpy()}
    fields.update({names.slot_field(name): optimizer.get_slot(part.shard, name).numpy()
                   for name in optimizer.get_slot_names()})
    return {**fields, names.CHANGED_AT: optimizer.stamps_of(part.shard).numpy()}


def base_tables(checkpoint: str, fields: dict[str, list[str]]) -> dict[str, dict[str, np.ndarray]]:
    """Tables `fields` names ({table: [field]}) as checkpoint `checkpoint` holds them (no stamps: a checkpoint has
    none)."""
    reader = tf.train.load_checkpoint(checkpoint)
    keys = list(reader.get_variable_to_shape_map())
    found = {}
    for table, names_of_fields in fields.items():
        mine = {field: reader.get_tensor(_base_key(keys, table, field)) for field in names_of_fields
                if field not in (names.ROWS, names.CHANGED_AT)}
        mine[names.ROWS] = np.arange(len(mine[names.VECTORS]))
        found[table] = mine
    return found


def fields_of(arrays: dict) -> dict[str, list[str]]:
    """{table: [field]} of a delta's arrays (its dense weights left out)."""
    fields: dict[str, list[str]] = {}
    for key in arrays:
        if names.SEPARATOR in key:
            table, field = key.split(names.SEPARATOR, 1)
            fields.setdefault(table, []).append(field)
    return fields


def _base_key(keys: list[str], table: str, field: str) -> str:
    """The checkpoint key of a delta field of `table` (a short name: delta_format.short_name)."""
    owners = [key for key in keys if names.short_name(key) == table or
              names.short_name(key.split("/.OPTIMIZER_SLOT/")[0] + "/.ATTRIBUTES/x") == table]
    if field.startswith(names.SLOT_PREFIX):
        slot = field.removeprefix(names.SLOT_PREFIX)
        wanted = [k for k in owners if "/.OPTIMIZER_SLOT/" in k and k.split("/")[-3] == slot] or \
            [k for k in owners if k.endswith(f"/row_slot-{slot}")]
    elif any(k.endswith("/row_held") for k in owners):
        wanted = [k for k in owners if k.endswith("/" + DYNAMIC_BASE[field])]
    else:
        wanted = [k for k in owners if k.endswith("/VARIABLE_VALUE") and "/.OPTIMIZER_SLOT/" not in k]
    assert len(wanted) == 1, (table, field, wanted)
    return wanted[0]


def deltas_on_disk(serving: Path, version: int) -> list[tuple[dict, dict]]:
    """(manifest, {key: array}) of each delta of `version`, in order."""
    folder = serving / names.DIRECTORY
    found = sorted((names.parse_delta_name(p.name), p) for p in folder.iterdir() if names.parse_delta_name(p.name))
    deltas = []
    for (number, _), path in found:
        if number != version:
            continue
        reader = tf.train.load_checkpoint(str(path / names.BUNDLE))
        deltas.append((json.loads((path / names.MANIFEST).read_text()),
                       {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()}))
    return deltas


def replayed(base: dict, deltas: list[tuple[dict, dict]]) -> dict:
    """`base` with each delta's rows written over it, in order (stamps, which a base has not: -1 where no delta
    wrote one)."""
    tables = {table: {field: array.copy() for field, array in fields.items()} for table, fields in base.items()}
    for fields in tables.values():
        fields[names.CHANGED_AT] = np.full(len(fields[names.ROWS]), -1, np.int64)
    for _, arrays in deltas:
        for table, fields in tables.items():
            rows = arrays[names.field_key(table, names.ROWS)]
            for field, array in fields.items():
                array[rows] = arrays[names.field_key(table, field)]
    return tables


def differences(expected: dict, got: dict) -> list[str]:
    """Where two sets of tables differ (stamps only where both have them: a checkpoint has none, a replay only
    for the rows a delta held)."""
    found = []
    for table, fields in expected.items():
        for field, array in fields.items():
            mine = got[table].get(field)
            if mine is None:
                continue
            if field == names.CHANGED_AT:
                stamped = mine >= 0
                array, mine = array[stamped], mine[stamped]
            if array.shape != mine.shape or not np.array_equal(array, mine):
                found.append(f"{table}.{field}")
    return found
