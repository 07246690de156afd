"""A template's predictions with its weights read from a bundle, each table read only where the inputs look.

This is how an export is checked, and a checkpoint scored, without putting a table back in one process: the model
runs once with every table replaced by a stand-in that notes what is asked for (rows of a hashed table, ids of a
dynamic one) and answers zeros; those rows are read from the bundle (a dynamic table's ids found by scanning its
ids a chunk at a time); then it runs again with the stand-ins answering. A placeholder no table layer of the
toolkit's reads a row at a time (a large dense weight, a Keras Embedding) is read whole, with a warning when it is
larger than a chunk. A model with no table placeholder runs once, on its weights read whole.
"""

from __future__ import annotations

import contextlib

import numpy as np

from tables.kinds import served_tables
from tables.streaming.bundle import BundleReader
from tables.streaming.rows import CHUNK_BYTES, nbytes


class PartialModel:
    """A template (`serve`, taking raw features, around `inner`, the model as training built it) whose weights come
    from the bundle `reader` reads: `keys` gives each weight of `inner` its key there (None: the template's
    value), `placed` the weights that are table placeholders."""

    def __init__(self, serve, inner, reader: BundleReader, keys: dict, placed: list, *, log=None,
                 chunk_bytes: int = CHUNK_BYTES):
        self.serve, self.inner, self.reader, self.keys, self.chunk_bytes = serve, inner, reader, keys, chunk_bytes
        placed_refs = {weight.ref() for weight in placed}
        served = served_tables(inner)
        self.streamed = [table for table in served if table.streamed(placed_refs)]
        streamed = {weight.ref() for table in self.streamed for weight in table.weights()}
        for weight in inner.weights:
            key = keys.get(weight.ref())
            if weight.ref() in streamed or key is None:
                continue  # read a row at a time, or no value in the bundle (the template's)
            if weight.ref() in placed_refs and log is not None and _over_a_chunk(reader, key, chunk_bytes):
                log.warning("%s is read whole (%s, over a chunk of training.stream_chunk_mb): no table lookup "
                            "reads it a row at a time", weight.name, reader.shapes[key])
            weight.assign(reader.whole(key))
        for table in served:
            table.loaded()

    @property
    def whole(self) -> bool:
        """Whether every weight was read whole (no table stands in): the model runs as it is."""
        return not self.streamed

    def __call__(self, inputs, *, raw: bool = False) -> np.ndarray:
        """The predictions on `inputs` (raw features with `raw`, else the model's), reading only the rows they
        look up."""
        model = self.serve if raw else self.inner
        if self.whole:
            return model(inputs, training=False).numpy()
        stand_ins = [table.stand_in(self.reader, self.keys) for table in self.streamed]
        with contextlib.ExitStack() as standing:
            for table, stand_in in zip(self.streamed, stand_ins, strict=True):
                standing.enter_context(table.standing_in(stand_in))
            model(inputs, training=False)  # notes what each table is asked for
            for stand_in in stand_ins:
                stand_in.fetch(self.chunk_bytes)
            return model(inputs, training=False).numpy()


def _over_a_chunk(reader: BundleReader, key: str, chunk_bytes: int) -> bool:
    return nbytes(list(reader.shapes[key]), reader.dtypes[key]) > chunk_bytes
