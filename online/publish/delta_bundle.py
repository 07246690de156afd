"""A delta's bundle: each table's changed rows as one key per field, and the dense weights, while no process holds
more than a chunk of rows (read) and a chunk kept; with `training.output_dir_shared` each ps writes its own
tables' rows instead (delta_rows_on_ps.py).

A table's changed rows are read on its ps a chunk at most at a time (tables/changed_rows.py). Few rows change between
deltas, so they are kept, chunk after chunk, until the table is read, then written as one tensor per field: a
SaveV2 per field and table (a SaveV2 costs 1-2 ms whatever it holds; one per field and chunk, then again to
gather them, made most of a delta's time). A table whose changed rows outgrow a chunk goes to a scratch bundle as
they come (their count is not known before the end) and into the delta's bundle as slices of one key per field.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import tensorflow as tf

from online.publish import delta_format as names
from online.publish import delta_rows_on_ps as rows_on_ps
from tables.streaming.bundle import BundleReader, BundleWriter
from tables.streaming.rows import chunk_rows, slice_spec


@dataclasses.dataclass
class _Read:
    """A table's changed rows read so far: kept in memory (each a list of fields) until they outgrow a chunk, then
    in the scratch bundle, (key, rows) per chunk."""

    table: object
    kept: list[list[tf.Tensor]] = dataclasses.field(default_factory=list)
    spilled: list[tuple[str, int]] = dataclasses.field(default_factory=list)

    @property
    def kept_rows(self) -> int:
        return sum(int(values[0].shape[0]) for values in self.kept)

    @property
    def rows(self) -> int:
        return self.kept_rows + sum(rows for _, rows in self.spilled)


class _Scratch:
    """The scratch bundle beside the delta, opened on the first chunk spilled."""

    def __init__(self, prefix: str):
        self.prefix, self.writer = prefix, None

    def spill(self, read: _Read, values: list[tf.Tensor]) -> None:
        self.writer = self.writer or BundleWriter(self.prefix)
        key = f"{read.table.name}/{len(read.spilled)}"
        for field, value in zip(read.table.fields, values, strict=True):
            self.writer.add(f"{key}/{field}", value)
        read.spilled.append((key, int(values[0].shape[0])))

    def reader(self) -> BundleReader | None:
        if self.writer is None:
            return None
        self.writer.finish()
        return BundleReader(self.prefix)

    def abandon(self) -> None:
        if self.writer is not None:
            self.writer.abandon()


def write_bundle(source, writing: Path, from_step: int, chunk_bytes: int, version: int,
                 keep_from: int | None = None) -> dict[str, int]:
    """The delta's bundle of DeltaSource `source` in `writing`: rows stamped at or after `from_step`, the dense
    weights, and the version it applies to (`delta_version`, as `apply_delta` takes it: a 0.5 follower, which reads
    it from the bundle, can send it); returns the rows written per table. With the source's `rows_on_ps` each ps
    writes its tables' rows (delta_rows_on_ps.py; a row it drops must be stamped at or after `keep_from`)."""
    writer = BundleWriter(str(writing / names.BUNDLE))
    scratch = _Scratch(str(writing / "scratch"))
    try:
        if source.rows_on_ps:
            rows = rows_on_ps.write_tables(writer, source.tables, from_step,
                                           from_step if keep_from is None else keep_from, chunk_bytes)
        else:
            rows = _write_tables(writer, scratch, source.tables, from_step, chunk_bytes)
        for name, variables in source.dense.items():
            values = [variable.read_value() for variable in variables]
            writer.add(name, values[0] if len(values) == 1 else np.concatenate([value.numpy() for value in values]))
        writer.add(names.VERSION, tf.constant(version, tf.int64))
        writer.finish()
    except BaseException:
        writer.abandon()
        scratch.abandon()
        raise
    for path in writing.glob("scratch.*"):
        path.unlink()
    return rows


def _write_tables(writer: BundleWriter, scratch: _Scratch, tables: list, from_step: int,
                  chunk_bytes: int) -> dict[str, int]:
    """Every table's changed rows through this process: kept, or spilled to the scratch bundle, then written."""
    reads = [_read_table(table, scratch, from_step, chunk_bytes) for table in tables]
    for read in reads:
        if not read.spilled:
            _write_kept(writer, read, from_step)
    spilled = [read for read in reads if read.spilled]
    if spilled:
        _write_spilled(writer, scratch.reader(), spilled)
    return {read.table.name: read.rows for read in reads}


def _read_table(table, scratch: _Scratch, from_step: int, chunk_bytes: int) -> _Read:
    """Reads the table's changed rows, chunk by chunk of its parts, keeping them while they fit in a chunk."""
    read, limit = _Read(table), chunk_rows(table.row_bytes, chunk_bytes)
    for part in table.readers:
        for begin, end in part.ranges(from_step, limit):
            values = part.read(begin, end, from_step)
            if not int(values[0].shape[0]):
                continue
            read.kept.append(values)
            if read.spilled or read.kept_rows > limit:  # outgrown: what was kept goes first, in the order read
                for kept in read.kept:
                    scratch.spill(read, kept)
                read.kept = []
    return read


def _write_kept(writer: BundleWriter, read: _Read, from_step: int) -> None:
    """A table's kept rows, one tensor per field (an empty one of the right shape when no row changed)."""
    if read.kept:  # joined in NumPy: an eager concatenation of a new kind waits for every task, a stopped one too
        fields = [np.concatenate([value.numpy() for value in values]) for values in zip(*read.kept, strict=True)]
    else:
        fields = read.table.readers[0].read(0, 0, from_step)
    for field, value in zip(read.table.fields, fields, strict=True):
        writer.add(names.field_key(read.table.name, field), value)


def _write_spilled(writer: BundleWriter, scratch: BundleReader, spilled: list[_Read]) -> None:
    """Spilled tables' chunks, from the scratch bundle, as slices of one key per field."""
    for read in spilled:
        total = read.rows
        for field in read.table.fields:
            offset = 0
            for key, rows in read.spilled:
                value = scratch.whole(f"{key}/{field}")
                writer.add(names.field_key(read.table.name, field), value,
                           slice_spec([total, *value.shape[1:]], offset, offset + rows))
                offset += rows
