"""Rows of a table read from a bundle (a checkpoint or a SavedModel's variables) a window of at most a chunk at a
time, and a hashed table's stand-in that serves only the rows a check looks up (tables/row_source.py)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tables.streaming.bundle import BundleReader
from tables.streaming.rows import CHUNK_BYTES, chunk_rows, nbytes


def read_rows(reader: BundleReader, key: str, rows: np.ndarray, chunk_bytes: int = CHUNK_BYTES) -> tf.Tensor:
    """Rows `rows` (sorted, distinct) of `key`: each row's own bytes where the bundle allows it
    (BundleReader.gather), else a window of at most a chunk of rows at a time (the first to the last wanted row in
    it) gathered from. Not one TensorFlow read per run of rows: TensorFlow reads every stored slice a requested
    slice touches whole, so 64 single rows of a 64 MB chunk cost 64 reads of it (0.90 s, against 0.015 s for the
    chunk once)."""
    shape, dtype = list(reader.shapes[key]), reader.dtypes[key]
    if not len(rows):
        return tf.zeros([0, *shape[1:]], dtype)
    gathered = reader.gather(key, rows)
    if gathered is not None:
        return tf.constant(gathered)
    per_window = chunk_rows(nbytes(shape[1:], dtype), chunk_bytes)
    parts, start = [], 0
    while start < len(rows):
        first = int(rows[start])
        end = int(np.searchsorted(rows, first + per_window, side="left"))
        window = reader.rows(key, first, int(rows[end - 1]) + 1)
        parts.append(tf.gather(window, rows[start:end] - first))
        start = end
    return tf.concat(parts, axis=0)


class BundleRows:
    """Stands in for one hashed table: records the rows asked for, then serves them as read from `key`."""

    def __init__(self, reader: BundleReader, key: str):
        self.reader, self.key = reader, key
        self.asked: set[int] = set()
        self.rows, self.values = None, None

    def __call__(self, rows: tf.Tensor) -> tf.Tensor:
        wanted = rows.numpy().reshape(-1).astype(np.int64)
        if self.values is None:
            self.asked.update(wanted.tolist())
            return tf.zeros([len(wanted), *self.reader.shapes[self.key][1:]], self.reader.dtypes[self.key])
        return tf.gather(self.values, np.searchsorted(self.rows, wanted))

    def fetch(self, chunk_bytes: int) -> None:
        self.rows = np.array(sorted(self.asked), dtype=np.int64)
        self.values = read_rows(self.reader, self.key, self.rows, chunk_bytes)
