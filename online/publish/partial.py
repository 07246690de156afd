"""A template's predictions with its weights read from a bundle, each table read only where the inputs look.

This is how an export is checked, and a checkpoint scored, without putting a table back in one process: the model
runs once with every table replaced by a stand-in that notes what is asked for (rows of a hashed table, ids of a
dynamic one) and answers zeros; those rows are read from the bundle (a dynamic table's ids found by scanning its
ids a chunk at a time); then it runs again with the stand-ins answering. A placeholder no table layer of the
toolkit's reads a row at a time (a large dense weight, a Keras Embedding) is read whole, with a warning when it is
larger than a chunk. A model with no table placeholder runs once, on its weights read whole.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tables.dynamic.exported import dynamic_tables
from tables.row_source import id_stand_ins, stand_ins
from tables.streaming.bundle import BundleReader
from tables.streaming.rows import CHUNK_BYTES, chunk_rows, nbytes, row_ranges
from tables.fused import rows_read_by_lookup


def read_rows(reader: BundleReader, key: str, rows: np.ndarray, chunk_bytes: int = CHUNK_BYTES) -> tf.Tensor:
    """Rows `rows` (sorted, distinct) of `key`, read a window of at most a chunk of rows at a time (the first to the
    last wanted row in it) and gathered from it. Not one read per run of rows: TensorFlow reads every stored slice
    a requested slice touches whole, so 64 single rows of a 64 MB chunk cost 64 reads of it (0.90 s, against
    0.015 s for the chunk once)."""
    shape, dtype = list(reader.shapes[key]), reader.dtypes[key]
    if not len(rows):
        return tf.zeros([0, *shape[1:]], dtype)
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


class BundleIds:
    """Stands in for one dynamic table as exported: records the ids asked for, then finds those held by scanning
    the per-row ids (`ids`, with `held` flags, or None when every row is held) a chunk at a time, and serves
    their rows of `vectors`."""

    def __init__(self, reader: BundleReader, ids: str, held: str | None, vectors: str):
        self.reader, self.keys = reader, (ids, held, vectors)
        self.asked: set[int] = set()
        self.found, self.values = None, None

    def __call__(self, ids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        wanted = ids.numpy().reshape(-1).astype(np.int64)
        width = self.reader.shapes[self.keys[2]][1:]
        if self.values is None:
            self.asked.update(wanted.tolist())
            return tf.zeros([len(wanted)], tf.bool), tf.zeros([len(wanted), *width], self.reader.dtypes[self.keys[2]])
        at = np.minimum(np.searchsorted(self.found, wanted), max(len(self.found) - 1, 0))
        present = (self.found[at] == wanted) if len(self.found) else np.zeros(len(wanted), bool)
        return tf.constant(present), tf.gather(self.values, at) if len(self.found) else tf.zeros(
            [len(wanted), *width], self.reader.dtypes[self.keys[2]])

    def fetch(self, chunk_bytes: int) -> None:
        ids_key, held_key, vectors_key = self.keys
        wanted = np.array(sorted(self.asked), dtype=np.int64)
        rows, found = [], []
        total = self.reader.rows_of(ids_key)
        for begin, end in row_ranges(total, chunk_rows(9, chunk_bytes)):
            chunk = self.reader.rows(ids_key, begin, end).numpy()
            hit = np.isin(chunk, wanted)
            if held_key is not None:
                hit &= self.reader.rows(held_key, begin, end).numpy()
            rows.append(begin + np.flatnonzero(hit))
            found.append(chunk[hit])
        rows, found = np.concatenate(rows), np.concatenate(found)
        order = np.argsort(found, kind="stable")  # by id, for the lookups' binary search
        self.found = found[order]
        self.values = tf.gather(read_rows(self.reader, vectors_key, rows, chunk_bytes), order)


class PartialModel:
    """A template (`serve`, taking raw features, around `inner`, the model as training built it) whose weights come
    from the bundle `reader` reads: `keys` gives each weight of `inner` its key there (None: the template's
    value), `placed` the weights that are table placeholders."""

    def __init__(self, serve, inner, reader: BundleReader, keys: dict, placed: list, *, log=None,
                 chunk_bytes: int = CHUNK_BYTES):
        self.serve, self.inner, self.reader, self.chunk_bytes = serve, inner, reader, chunk_bytes
        placed_refs = {weight.ref() for weight in placed}
        looked_up = {weight.ref() for weight in rows_read_by_lookup(inner)}
        self.tables = {ref: keys[ref] for ref in placed_refs & looked_up}
        self.dynamic = {}
        for layer in dynamic_tables(inner):
            if layer.vectors.ref() in placed_refs or layer.ids.ref() in placed_refs:
                self.dynamic[id(layer)] = (keys[layer.ids.ref()], keys[layer.held.ref()], keys[layer.vectors.ref()])
        streamed = set(self.tables) | {getattr(layer, name).ref() for layer in dynamic_tables(inner)
                                       if id(layer) in self.dynamic for name in ("ids", "held", "vectors")}
        for weight in inner.weights:
            key = keys.get(weight.ref())
            if weight.ref() in streamed or key is None:
                continue  # read a row at a time, or no value in the bundle (the template's)
            if weight.ref() in placed_refs and log is not None and _over_a_chunk(reader, key, chunk_bytes):
                log.warning("%s is read whole (%s, over a chunk of training.stream_chunk_mb): no table lookup "
                            "reads it a row at a time", weight.name, reader.shapes[key])
            weight.assign(reader.whole(key))
        for layer in dynamic_tables(inner):
            layer.reset_index()

    @property
    def whole(self) -> bool:
        """Whether every weight was read whole (no table stands in): the model runs as it is."""
        return not self.tables and not self.dynamic

    def __call__(self, inputs, *, raw: bool = False) -> np.ndarray:
        """The predictions on `inputs` (raw features with `raw`, else the model's), reading only the rows they
        look up."""
        model = self.serve if raw else self.inner
        if self.whole:
            return model(inputs, training=False).numpy()
        rows = {ref: BundleRows(self.reader, key) for ref, key in self.tables.items()}
        ids = {layer: BundleIds(self.reader, *keys) for layer, keys in self.dynamic.items()}
        with stand_ins(rows), id_stand_ins(ids):
            model(inputs, training=False)  # notes what each table is asked for
            for stand_in in [*rows.values(), *ids.values()]:
                stand_in.fetch(self.chunk_bytes)
            return model(inputs, training=False).numpy()


def _over_a_chunk(reader: BundleReader, key: str, chunk_bytes: int) -> bool:
    return nbytes(list(reader.shapes[key]), reader.dtypes[key]) > chunk_bytes
