"""A dynamic table as exported (exported.py's ServingTables) seen as a ServedTable (tables/served_table.py): its
per-row weights are its training state's rows; a check finds the ids its lookups ask for by scanning the per-row
ids a chunk at a time; a delta writes rows, held flags and ids, and keeps the id -> row index right: a row's
previous id leaves the index (where the index still points it at that row), then the delta's held ids go in, the
last row of an id winning."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tables.bundle_rows import read_rows
from tables.dynamic.exported import ServingTables, state_keys
from tables.row_fields import HELD, IDS, ROWS, VECTORS, field_key
from tables.row_source import id_stand_ins
from tables.served_table import ServedTable
from tables.streaming.bundle import BundleReader
from tables.streaming.rows import chunk_rows, row_ranges

FIELDS = (ROWS, HELD, IDS, VECTORS)  # what a served table takes of a delta's rows (the rest is training's)


class ServedDynamic(ServedTable):
    def __init__(self, layer: ServingTables):
        self.layer = layer

    def weights(self) -> list:
        return [self.layer.ids, self.layer.held, self.layer.vectors]

    def training_keys(self, keys: dict) -> dict:
        return {**state_keys(self.layer, keys[self.layer.shared.ref()]), self.layer.indexed.ref(): None}

    def earlier_keys(self, reader, keys: dict) -> tuple[dict, list]:
        """A checkpoint of an earlier version held the ids concatenated: read through them, of any count."""
        layer = self.layer
        if reader.has(keys[layer.ids.ref()]):
            return {}, []
        earlier = keys[layer.ids.ref()].rsplit("/", 1)[0] + "/"
        return ({layer.ids.ref(): earlier + "ids", layer.held.ref(): None, layer.vectors.ref(): earlier + "vectors"},
                [layer.ids, layer.vectors])

    def streamed(self, placed: set) -> bool:
        return self.layer.vectors.ref() in placed or self.layer.ids.ref() in placed

    def stand_in(self, reader, keys: dict) -> "BundleIds":
        return BundleIds(reader, *(keys[weight.ref()] for weight in self.weights()))

    def standing_in(self, stand_in):
        return id_stand_ins({id(self.layer): stand_in})

    def loaded(self) -> None:
        self.layer.reset_index()

    def delta_key(self, keys: dict) -> str:
        return keys[self.layer.ids.ref()]

    def delta_inputs(self, name: str) -> dict[str, tf.TensorSpec]:
        specs = {}
        for field in FIELDS:
            key = field_key(name, field)
            shape = [None, *self.layer.vectors.shape[1:]] if field == VECTORS else [None]
            dtype = {HELD: tf.bool, VECTORS: self.layer.vectors.dtype}.get(field, tf.int64)
            specs[key] = tf.TensorSpec(shape, dtype, name=key)
        return specs

    def apply_delta(self, name: str, inputs: dict) -> list:
        return [apply_rows(self.layer, *(inputs[field_key(name, field)] for field in FIELDS))]


def apply_rows(layer: ServingTables, rows, held, ids, vectors) -> tf.Operation:
    """Rows `rows` of a served dynamic table take `held`, `ids` and `vectors`, its index kept right."""
    with tf.control_dependencies([layer.ensure_indexed()]):
        were_held, were = tf.gather(layer.held, rows), tf.gather(layer.ids, rows)
        pointed = tf.reshape(layer.index.lookup(were), [-1])
        removed = layer.index.remove(tf.boolean_mask(were, were_held & tf.equal(pointed, rows)))
    with tf.control_dependencies([removed]):
        written = [layer.ids.scatter_update(tf.IndexedSlices(ids, rows)),
                   layer.held.scatter_update(tf.IndexedSlices(held, rows)),
                   layer.vectors.scatter_update(tf.IndexedSlices(vectors, rows))]
    new_ids, new_rows = tf.boolean_mask(ids, held), tf.boolean_mask(rows, held)
    last_ids, last_rows = last_of_each(new_ids, new_rows)
    with tf.control_dependencies(written):
        return layer.index.insert(last_ids, last_rows)


def last_of_each(ids: tf.Tensor, rows: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Each distinct id of `ids` once, with the row of its last occurrence."""
    backwards_ids, backwards_rows = tf.reverse(ids, [0]), tf.reverse(rows, [0])
    distinct, position = tf.unique(backwards_ids)
    first = tf.math.unsorted_segment_min(tf.range(tf.size(backwards_ids)), position, tf.size(distinct))
    return distinct, tf.gather(backwards_rows, first)


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
