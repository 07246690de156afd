"""A delta's bundle: each table's changed rows as one key per field, and the dense weights, while no process holds
more than a chunk of rows; with `training.output_dir_shared` each ps writes its own tables' rows instead
(delta_ranges.py).

A table's changed rows are counted on its ps, then read a chunk at most at a time (tables/changed_rows.py). Few rows
change between deltas, so a table whose changed rows fit a chunk is read whole and written as one tensor per field:
a SaveV2 per field and table (a SaveV2 costs 1-2 ms whatever it holds; one per field and chunk, then again to
gather them, made most of a delta's time). A table whose changed rows outgrow a chunk is written a counted range at a
time, as slices of one key per field (delta_ranges.py), each row once.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf

from online.publish import delta_format as names
from online.publish import delta_ranges
from tables.streaming.bundle import BundleWriter
from tables.streaming.rows import chunk_rows


def write_bundle(source, writing: Path, from_step: int, chunk_bytes: int, version: int,
                 keep_from: int | None = None) -> dict[str, int]:
    """The delta's bundle of DeltaSource `source` in `writing`: rows stamped at or after `from_step`, the dense
    weights, and the version it applies to (`delta_version`, as `apply_delta` takes it: a 0.5 follower, which reads
    it from the bundle, can send it); returns the rows written per table. With the source's `rows_on_ps` each ps
    writes its tables' rows (delta_ranges.py). A row dropped for changing after it was counted must be stamped at or
    after `keep_from` (default `from_step`)."""
    writer = BundleWriter(str(writing / names.BUNDLE))
    keep_from = from_step if keep_from is None else keep_from
    try:
        if source.rows_on_ps:
            rows = delta_ranges.write_tables(writer, source.tables, from_step, keep_from, chunk_bytes)
        else:
            rows = {table.name: _write_table(writer, table, from_step, keep_from, chunk_bytes)
                    for table in source.tables}
        for name, variables in source.dense.items():
            values = [variable.read_value() for variable in variables]
            writer.add(name, values[0] if len(values) == 1 else np.concatenate([value.numpy() for value in values]))
        writer.add(names.VERSION, tf.constant(version, tf.int64))
        writer.finish()
    except BaseException:
        writer.abandon()
        raise
    return rows


def _write_table(writer: BundleWriter, table, from_step: int, keep_from: int, chunk_bytes: int) -> int:
    """A table's changed rows through this process: kept and written whole when they fit a chunk, else a counted
    range at a time; returns how many."""
    planned = delta_ranges.planned_ranges(table, from_step, chunk_bytes)
    if sum(range_.count for range_ in planned) > chunk_rows(table.row_bytes, chunk_bytes):
        for range_ in planned:
            delta_ranges.write_range_here(writer, range_, from_step, keep_from)
        return sum(range_.count for range_ in planned)
    return _write_kept(writer, table, [delta_ranges.read(range_, from_step) for range_ in planned], from_step)


def _write_kept(writer: BundleWriter, table, kept: list[list[tf.Tensor]], from_step: int) -> int:
    """A table's rows read whole (every row read, those that changed after the count too), one tensor per field (an
    empty one of the right shape when no row changed); returns how many."""
    kept = [values for values in kept if int(values[0].shape[0])]
    if kept:  # joined in NumPy: an eager concatenation of a new kind waits for every task, a stopped one too
        fields = [np.concatenate([value.numpy() for value in values]) for values in zip(*kept, strict=True)]
    else:
        fields = table.readers[0].read(0, 0, from_step)
    for field, value in zip(table.fields, fields, strict=True):
        writer.add(names.field_key(table.name, field), value)
    return int(fields[0].shape[0])
