"""Row ranges of tables: how many rows make a chunk, and the slice specs TensorFlow's bundles name them by.

CHUNK_BYTES is the bound every streamed path keeps: a process that reads or writes a table holds at most a chunk
of its rows at a time (and, while batching small variables into one write, at most one more chunk). A value over a
quarter of a chunk is a table (`is_table`): streamed by rows, never read whole where a checkpoint is written,
restored or exported.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

CHUNK_BYTES = 16 << 20  # 16 MiB, `training.stream_chunk_mb`'s default: the chief's peak stays flat as tables grow
MB = 1 << 20


def chunk_bytes_of(options) -> int:
    """The chunk TrainingOptions `options` ask for (`stream_chunk_mb`), in bytes."""
    return max(1, round(options.stream_chunk_mb * MB))


def is_table(shape: Sequence[int], dtype, chunk_bytes: int = CHUNK_BYTES) -> bool:
    """Whether a value of `shape` and `dtype` is a table, streamed a chunk of rows at a time: over a quarter of a
    chunk."""
    return len(shape) >= 1 and nbytes(shape, dtype) > chunk_bytes // 4


def chunk_rows(row_bytes: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Rows per chunk for rows of `row_bytes` bytes: at least one."""
    return max(1, chunk_bytes // max(1, row_bytes))


def row_ranges(rows: int, per_chunk: int) -> list[tuple[int, int]]:
    """[begin, end) ranges covering `rows` rows, `per_chunk` at a time."""
    return [(begin, min(begin + per_chunk, rows)) for begin in range(0, rows, per_chunk)]


def slice_spec(full_shape: Sequence[int], begin: int, end: int) -> str:
    """TensorFlow's slice spec for rows [begin, end) of a tensor of `full_shape`: "N d begin,length:-"."""
    dims = " ".join(str(int(d)) for d in full_shape)
    rest = ":".join("-" for _ in full_shape[1:])
    return f"{dims} {begin},{end - begin}" + (f":{rest}" if rest else "")


def nbytes(shape: Sequence[int], dtype: tf.DType) -> int:
    return int(np.prod(shape, dtype=np.int64)) * dtype.size


@dataclasses.dataclass(frozen=True)
class RowSlice:
    """Rows `offset` .. `offset + rows` of the checkpoint key `key`, a tensor of `full_shape`."""

    key: str
    full_shape: tuple[int, ...]
    offset: int
    dtype: tf.DType

    def spec(self, begin: int, end: int) -> str:
        """The slice spec of this slice's own rows [begin, end)."""
        return slice_spec(self.full_shape, self.offset + begin, self.offset + end)

    @property
    def row_bytes(self) -> int:
        return nbytes(self.full_shape[1:], self.dtype)


@dataclasses.dataclass
class RowGroup:
    """Slices of the same `rows` rows that live on one device and are read together, a chunk at a time (a table
    shard and its optimizer slots; a dynamic table's rows, slots and stamps): `read(begin, end)` gives rows
    [begin, end) of each slice, `write(begin, end, values)` puts them back; `device` is where `read` leaves them (None:
    where it is called), so a save there writes them without moving them."""

    slices: list[RowSlice]
    rows: int
    read: Callable[[int, int], list[tf.Tensor]]
    write: Callable[[int, int, list[tf.Tensor]], None]
    device: str | None = None

    @property
    def row_bytes(self) -> int:
        return sum(s.row_bytes for s in self.slices)

    def ranges(self, chunk_bytes: int = CHUNK_BYTES) -> list[tuple[int, int]]:
        return row_ranges(self.rows, chunk_rows(self.row_bytes, chunk_bytes))
