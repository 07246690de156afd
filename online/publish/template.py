"""The serving model of a run built as a template: its architecture and small weights, with each table a placeholder.

An exporter never builds a table: under `table_placeholders` every weight over a quarter of a chunk is made
`[None, ...]` holding one row of zeros, so a SavedModel's signatures are traced against tables of any row
count and a table's rows come later, streamed from a checkpoint into the written files (saved_model.py). The
model is built as training builds it, minus the optimizers (`build_serving`), so its variables carry the names
the training checkpoint records them by (`full_name` in its object graph), which is how each is found there.
"""

from __future__ import annotations

import tf_keras

from cluster.recommender_options import RECOMMENDER_MODELS
from models import input_contract, recommenders, zoo
from tables.kinds import served_tables
from online.publish.saved_model import training_keys
from models.raw_export import servable
from tables.streaming.placeholders import table_placeholders
from tables.streaming.rows import CHUNK_BYTES


def build_serving(options, source, *, chunk_bytes: int = CHUNK_BYTES) -> tuple[tf_keras.Model, tf_keras.Model, list]:
    """The model as exported (no optimizer slots, a dynamic table in its serving form), its tables placeholders
    (only the model's own weights: metrics are made at compile, outside), compiled with its loss and metrics:
    (the model taking `source`'s raw features, the model inside it as training built it, the placeholders)."""
    with table_placeholders(chunk_bytes) as placed:
        if options.model in RECOMMENDER_MODELS:
            model = recommenders.build_for_serving(options.model, recommenders.from_training(options),
                                                   features=source.feature_spec, compiled=False)
        else:
            model = zoo.build(options.model, source.feature_spec, source.num_classes, source.name)
    if options.model in RECOMMENDER_MODELS:
        recommenders.compile_for_serving(model)
    else:
        input_contract.check(model, source.feature_spec, model_name=options.model, source_name=source.name)
        zoo.compile_model(model, options)
    return servable(model, source), model, placed


class Template:
    """The run's serving model built once as a template (tables as placeholders): `serve` takes raw features,
    `inner` the model's own; `at(checkpoint)` gives it that checkpoint's weights, tables read where inputs look."""

    def __init__(self, options, source, *, chunk_bytes: int = CHUNK_BYTES, log=None):
        self.chunk_bytes, self.log = chunk_bytes, log
        self.serve, self.inner, self.placed = build_serving(options, source, chunk_bytes=chunk_bytes)
        self.keys = training_keys(self.inner)

    def at(self, checkpoint: str):
        """A PartialModel of this template with the weights of training checkpoint `checkpoint` (a dynamic table
        of an earlier version's checkpoint, which held its ids concatenated, read through its ids)."""
        from online.publish.partial import PartialModel
        from tables.streaming.bundle import BundleReader

        reader = BundleReader(checkpoint)
        keys, placed = dict(self.keys), list(self.placed)
        for table in served_tables(self.inner):
            changed, read_through = table.earlier_keys(reader, keys)
            keys.update(changed)
            placed += read_through
        return PartialModel(self.serve, self.inner, reader, keys, placed, log=self.log, chunk_bytes=self.chunk_bytes)
