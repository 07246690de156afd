"""The data a model is built for: data.source_for with a user model's declared inputs, read from a build of it whose
tables are placeholders."""

from __future__ import annotations

import tensorflow as tf

from data import followed_for, source_for
from models import zoo
from models.input_contract import taken_inputs
from tables.streaming.placeholders import table_placeholders


def source_for_model(options, base_dir):
    """data.source_for with the user model's declared inputs: the DataSource every process that builds the model
    opens (features of unknown length batched as the model takes them)."""
    return source_for(options, base_dir, declared_by(options.model))


def data_for_model(options, base_dir):
    """What the exporter and the evaluator read: the followed folder (training.follow_data), or source_for_model."""
    return followed_for(options, base_dir) if options.follow_data else source_for_model(options, base_dir)


def declared_by(model_name: str | None):
    """For data.source_for: a function giving the inputs a user model `model_name` declares for features, or None
    for a zoo or recommender model (which takes features of unknown length ragged)."""
    if not model_name or ":" not in model_name:
        return None
    return lambda spec, num_classes, source_name: declared(model_name, spec, num_classes, source_name)


def declared(model_name: str, spec, num_classes: int | None, source_name: str):
    """The inputs (per example: a dict by name, or one spec) the model `model_name` declares for features `spec`,
    read from a build of it on this CPU whose large weights are one-row placeholders (nothing table-sized is
    allocated; tables/streaming/placeholders.py)."""
    with tf.device("/cpu:0"), table_placeholders():
        model = zoo.build(model_name, spec, num_classes, source_name)
    return taken_inputs(model, isinstance(spec, dict))
