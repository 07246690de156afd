"""A delta's table rows as counted ranges, each written once as slices of one key per field: by the ps that hold them
(`training.output_dir_shared`: no row crosses to the chief), or by the chief for a table whose rows outgrow a chunk.

A delta's key per field is one tensor, so its slices need the total of changed rows before any is written. Each
part's changed rows are counted on its ps first (the counts per block that reading goes by: tables/changed_rows.py),
which fixes every slice's place; then each range is read a chunk at a time and saved there: on the ps, all ps at once
(tables/streaming/per_ps.py), or on the chief, one range after the other. A stamp only moves forward, so a range read
after its count holds at least the rows counted; rows that changed in between are dropped down to the count, the
newest stamps first (on the ps, or in NumPy on the chief: no op of a new kind runs mid-run): their stamps are at or
after the delta's read step (or the delta's `from_step` at the least), so the next delta, which reads from this one's
`from_step`, carries them. A drop that would lose an older stamp fails the delta (the next one covers its rows).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from online.publish import delta_format as names
from tables.changed_rows import merged_ranges
from tables.streaming.bundle import BundleWriter
from tables.streaming.per_ps import on_each_ps
from tables.streaming.rows import chunk_rows, slice_spec


EVERY_STEP = -(1 << 62)  # a step every stamp is at or after


class DeltaRace(RuntimeError):
    """A range held other changed rows than it was counted with, beyond what the next delta carries."""


@dataclasses.dataclass(frozen=True)
class _Range:
    """Rows [begin, end) of one part, `count` of them changed, written at `offset` of the table's `total`."""

    table: object  # deltas._Table
    part: int
    begin: int
    end: int
    count: int
    offset: int
    total: int

    @property
    def device(self) -> str:
        return self.table.devices[self.part]


def write_tables(writer: BundleWriter, tables: list, rows_from: int, keep_from: int, chunk_bytes: int) -> dict:
    """Each table's rows stamped at or after `rows_from`, written by its ps into `writer`'s bundle; a row dropped
    for changing after its count must be stamped at or after `keep_from`. Returns the rows written per table."""
    planned = {table.name: planned_ranges(table, rows_from, chunk_bytes) for table in tables}
    on_each_ps([range_ for ranges in planned.values() for range_ in ranges], lambda range_: range_.device,
               lambda range_: _write_range(writer, range_, rows_from, keep_from))
    for table in tables:
        if not planned[table.name]:  # no changed row: an empty tensor of the right shape, from the chief
            for field, value in zip(table.fields, table.readers[0].read(0, 0, rows_from), strict=True):
                writer.add(names.field_key(table.name, field), value)
    return {name: sum(range_.count for range_ in ranges) for name, ranges in planned.items()}


def _write_range(writer: BundleWriter, range_: _Range, rows_from: int, keep_from: int) -> None:
    """The range's changed rows, read, cut to its count and saved on its ps; returns once they are written."""
    values = _exactly(range_, read(range_, rows_from), keep_from)
    _add_slices(writer, range_, values, range_.device)
    with tf.device(range_.device):  # a value computed after the saves on the ps: back once they are written
        tf.size(values[-1]).numpy()


def write_range_here(writer: BundleWriter, range_: _Range, rows_from: int, keep_from: int) -> None:
    """The range's changed rows, read to this process, cut to its count in NumPy and saved here."""
    _add_slices(writer, range_, _exactly_here(range_, [value.numpy() for value in read(range_, rows_from)],
                                              keep_from), None)


def _add_slices(writer: BundleWriter, range_: _Range, values: list, device: str | None) -> None:
    for field, value in zip(range_.table.fields, values, strict=True):
        writer.add(names.field_key(range_.table.name, field), value,
                   slice_spec([range_.total, *value.shape[1:]], range_.offset, range_.offset + range_.count),
                   device=device)


def planned_ranges(table, rows_from: int, chunk_bytes: int) -> list[_Range]:
    """The table's ranges of changed rows, each with its count and place, from one count per part."""
    if table.fields[-1] != names.CHANGED_AT:
        raise ValueError(f"table {table.name}: a delta is written a counted range at a time, so its reader must give "
                         "each row's stamp as its last field")
    limit, counted = chunk_rows(table.row_bytes, chunk_bytes), []
    for part, reader in enumerate(table.readers):
        blocks = reader.count(rows_from, limit)
        for begin, end in merged_ranges(blocks, limit, reader.rows):
            counted.append((part, begin, end, sum(blocks[begin // limit:(end + limit - 1) // limit])))
    total, ranges, offset = sum(count for *_, count in counted), [], 0
    for part, begin, end, count in counted:
        ranges.append(_Range(table, part, begin, end, count, offset, total))
        offset += count
    return ranges


def read(range_: _Range, rows_from: int) -> list[tf.Tensor]:
    """The range's rows stamped at or after `rows_from`, each field a tensor on its ps."""
    return range_.table.readers[range_.part].read(range_.begin, range_.end, rows_from)


def _exactly(range_: _Range, values: list[tf.Tensor], keep_from: int) -> list[tf.Tensor]:
    """`values` cut to the range's count on its ps, keeping the oldest stamps (the last field)."""
    if not _to_cut(range_, int(values[-1].shape[0])):
        return values
    with tf.device(range_.device):
        order = tf.argsort(values[-1], stable=True)
        _check_dropped(range_, int(tf.reduce_min(tf.gather(values[-1], order[range_.count:])).numpy()), keep_from)
        kept = order[:range_.count]
        return [tf.gather(value, kept) for value in values]


def _exactly_here(range_: _Range, values: list[np.ndarray], keep_from: int) -> list[np.ndarray]:
    """`values` (NumPy) cut to the range's count here, keeping the oldest stamps (the last field)."""
    if not _to_cut(range_, len(values[-1])):
        return values
    order = np.argsort(values[-1], kind="stable")
    _check_dropped(range_, int(values[-1][order[range_.count:]].min()), keep_from)
    return [value[order[:range_.count]] for value in values]


def _to_cut(range_: _Range, found: int) -> bool:
    """Whether `found` rows read are more than the range's count (fewer: a stamp moved back, which never happens)."""
    if found < range_.count:
        raise DeltaRace(f"table {range_.table.name}: rows {range_.begin}-{range_.end} of part {range_.part} held "
                        f"{found} changed rows after {range_.count} were counted (a stamp moved back)")
    return found > range_.count


def _check_dropped(range_: _Range, oldest_dropped: int, keep_from: int) -> None:
    if oldest_dropped < keep_from:
        raise DeltaRace(f"table {range_.table.name}: a row stamped {oldest_dropped} changed again "
                        f"while the delta read it, before step {keep_from} that the next delta reads from")


def warm_up(tables: list, directory) -> None:
    """Runs once, at set-up, every op a delta written on the ps runs (a cut included) on one row of each table's first
    part, into a bundle that is then removed: an op first run mid-run waits for every task, a frozen worker too."""
    writer = BundleWriter(str(directory / ".warm-up-delta"))
    try:
        for table in tables:
            if table.readers[0].rows < 2:
                continue
            _write_range(writer, _Range(table, 0, 0, 2, 1, 0, 1), EVERY_STEP, EVERY_STEP)  # two rows, one cut
        writer.finish()
    finally:
        writer.abandon()
        for path in directory.glob(".warm-up-delta.*"):
            path.unlink()
