"""TensorFlow checkpoint bundles (`prefix.index` + `prefix.data-*`) written in parts and read by row ranges.

A writer saves each tensor it is given as a part of its own under `<prefix>_temp/`, one SaveV2 of one tensor (the
op's attributes are then one of a few, one per dtype: a chief that has saved once never meets a SaveV2 it has not
run, which with a worker stopped would wait for it, as TensorFlow registers a new op with every task first), and
merges them into the bundle at the end (MergeV2Checkpoints renames the parts' data files and writes the index
last), so a bundle is whole or absent: a writer that dies leaves only `<prefix>_temp/`, removed by the next
write of the same prefix. A tensor saved as slices (a table's chunks) reads back whole with TensorFlow's own
loaders, or by row ranges with `BundleReader.rows`, which reads across the slices it was written in.
"""

from __future__ import annotations

import bisect
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import gen_io_ops, io_ops

from tables.streaming.bundle_index import BundleIndex, slice_rows
from tables.streaming.rows import slice_spec

TEMP_SUFFIX = "_temp"


class BundleWriter:
    """Writes one bundle at `prefix` from tensors given one at a time, each saved at once into a part of its own;
    `device` runs the saves (the chief's CPU under ParameterServerStrategy)."""

    def __init__(self, prefix: str, *, device: str | None = None):
        self.prefix, self.device = prefix, device or "/device:CPU:0"
        self.temp = Path(prefix + TEMP_SUFFIX)
        shutil.rmtree(self.temp, ignore_errors=True)
        self.temp.mkdir(parents=True)
        self.parts: list[str] = []
        self._naming = threading.Lock()  # each ps's thread adds its own parts (per_ps.py)

    def add(self, key: str, tensor: tf.Tensor, spec: str = "", *, device: str | None = None) -> None:
        """Saves `tensor` as `key` (or as the slice `spec` of it); with `device` (a ps holding it, which reaches the
        same folder at the same path) that task writes the part, and the bytes never leave it."""
        with self._naming:
            part = str(self.temp / f"part-{len(self.parts):06d}")
            self.parts.append(part)
        with tf.device(device or self.device):
            io_ops.save_v2(part, [key], [spec], [tensor])

    def finish(self) -> str:
        """Merges the parts into the bundle at `prefix` and returns it (a part another task writes must be written
        by now: checkpoint_io.save waits for each)."""
        with tf.device(self.device):
            gen_io_ops.merge_v2_checkpoints(self.parts, self.prefix, delete_old_dirs=True)
        shutil.rmtree(self.temp, ignore_errors=True)
        return self.prefix

    def abandon(self) -> None:
        shutil.rmtree(self.temp, ignore_errors=True)


class BundleReader:
    """Keys, shapes and dtypes of the bundle at `prefix`, and its tensors whole or by row ranges (read on
    `device`)."""

    def __init__(self, prefix: str, *, device: str | None = None):
        self.prefix, self.device = prefix, device or "/device:CPU:0"
        reader = tf.train.load_checkpoint(prefix)
        self.shapes = reader.get_variable_to_shape_map()
        self.dtypes = reader.get_variable_to_dtype_map()
        self._index = None  # its index as Python reads it (bundle_index.py), for `gather`

    def has(self, key: str) -> bool:
        return key in self.shapes

    def rows_of(self, key: str) -> int:
        shape = self.shapes[key]
        return int(shape[0]) if shape else 1

    def whole(self, key: str) -> tf.Tensor:
        return self._read(key, "")

    def rows(self, key: str, begin: int, end: int, *, device: str | None = None) -> tf.Tensor:
        """Rows [begin, end) of `key`, wherever its slices were cut; with `device` (a ps that reaches the same
        folder at the same path) that task reads them, and the bytes never leave it."""
        return self._read(key, slice_spec(self.shapes[key], begin, end), device)

    def gather(self, key: str, rows: np.ndarray) -> np.ndarray | None:
        """Rows `rows` of `key` read straight from the data files, a row's bytes each (where TensorFlow reads every
        stored slice a wanted row is in whole: a chunk a row); None where the bundle does not allow it (a string
        or big-endian tensor, slices cut across its rows), for `rows` to be read through TensorFlow instead."""
        places = self._row_places(key)
        if places is None:
            return None
        shape, dtype = list(self.shapes[key]), self.dtypes[key].as_numpy_dtype
        row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * np.dtype(dtype).itemsize
        out = np.empty([len(rows), *shape[1:]], dtype)
        flat = out.reshape(len(rows), -1).view(np.uint8).reshape(len(rows), row_bytes)
        files = {}
        try:
            for at, row in enumerate(rows.tolist()):
                begin, shard, offset = places[bisect.bisect_right(places, (row, float("inf"))) - 1]
                if shard not in files:
                    files[shard] = os.open(self._data_file(shard), os.O_RDONLY)
                flat[at] = np.frombuffer(os.pread(files[shard], row_bytes, offset + (row - begin) * row_bytes),
                                         np.uint8)
        finally:
            for descriptor in files.values():
                os.close(descriptor)
        return out

    def _row_places(self, key: str) -> list[tuple[int, int, int]] | None:
        """(first row, data file, offset) of each stored piece of `key`, by first row; None when unreadable so."""
        if self._index is None:
            self._index = BundleIndex.read(self.prefix)
        index = self._index
        dtype = self.dtypes[key]
        if (index.header.endianness != 0 or dtype == tf.string or not dtype.is_numpy_compatible
                or not self.shapes[key] or key.encode() not in index.entries):
            return None
        entry = index.entries[key.encode()]
        if not entry.slices:
            return [(0, entry.shard_id, entry.offset)]
        places = []
        for name, piece in index.pieces(key.encode()).items():
            if name != key.encode():
                extent = slice_rows(name)
                if extent is None:
                    return None
                places.append((extent[0], piece.shard_id, piece.offset))
        return sorted(places)

    def _data_file(self, shard: int) -> str:
        return f"{self.prefix}.data-{shard:05d}-of-{self._index.header.num_shards:05d}"

    def _read(self, key: str, spec: str, device: str | None = None) -> tf.Tensor:
        with tf.device(device or self.device):
            return io_ops.restore_v2(self.prefix, [key], [spec], [self.dtypes[key]])[0]


def remove_bundle(prefix: str) -> None:
    """Deletes the files of the bundle at `prefix` and any leftover of writing it."""
    for path in tf.io.gfile.glob(prefix + ".*"):
        tf.io.gfile.remove(path)
    shutil.rmtree(prefix + TEMP_SUFFIX, ignore_errors=True)
