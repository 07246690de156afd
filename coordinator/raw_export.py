"""The exported model takes the features as they are in the data: the data's own preprocessing in front of the model.

Whatever was trained (dlrm, wide_deep, a user model, with any tables) is wrapped, not rebuilt: `servable` puts a
RawFeatures layer, which runs the very Preprocessing object the training pipeline ran (data/preprocessing.py,
made again from its JSON config when the model is loaded), in front of it. So a serving system sends Criteo's
integers and hexadecimal strings, or a TFRecord schema's features, and the hashing happens inside the model.
A source that reads serialized tf.train.Example records (`parse_examples`) also gets a SavedModel signature
that takes them: `serving_default(examples)`, a string vector, parsed with the pipeline's own parsing.
"""

from __future__ import annotations

import json

import tensorflow as tf
import tf_keras

from coordinator.input_contract import keras_inputs
from data import preprocessing
from data.contract import describe

OUTPUT = "prediction"  # the output's name in the SavedModel's signatures


class RawFeatures(tf_keras.layers.Layer):
    """The data pipeline's preprocessing (given by its config) as a layer: raw features in, the model's out."""

    def __init__(self, preprocessing_config: dict, **kwargs):
        super().__init__(**{"trainable": False, **kwargs})
        self.config_text = json.dumps(preprocessing_config)  # text: Keras would wrap (and track) a dict's contents
        self.preprocess = preprocessing.from_config(json.loads(self.config_text))

    def call(self, raw):
        return self.preprocess(raw)

    def get_config(self):
        return {**super().get_config(), "preprocessing_config": json.loads(self.config_text)}


def _metric_copies(metrics) -> list:
    return [tf_keras.metrics.deserialize(tf_keras.metrics.serialize(m)) if isinstance(m, tf_keras.metrics.Metric)
            else m for m in metrics or ()]


def servable(model: tf_keras.Model, source) -> tf_keras.Model:
    """`model` (as exported, no training parts) taking `source`'s raw features, compiled with its loss and
    metrics so that it evaluates as loaded; the model itself when the source has no preprocessing."""
    if source is None or source.preprocessing is None:
        return model
    inputs = keras_inputs(source.raw_spec)
    features = RawFeatures(source.preprocessing.config, name="raw_features")(inputs)
    output = tf_keras.layers.Activation("linear", name=OUTPUT)(model(features))
    raw = tf_keras.Model(inputs, output, name=f"{model.name}_raw")
    compiled = model._get_compile_args() if model.compiled_loss is not None else {}
    raw.compile(loss=compiled.get("loss"), metrics=_metric_copies(compiled.get("metrics")))
    return raw


def signatures(model: tf_keras.Model, source) -> dict | None:
    """The SavedModel's serving signature when the source reads tf.train.Example records (else Keras' own, which
    takes the raw features by name)."""
    parse = getattr(source, "parse_examples", None)
    if parse is None:
        return None

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve_examples(examples):
        return {OUTPUT: model(parse(examples), training=False)}

    return {"serving_default": serve_examples.get_concrete_function()}


def raw_description(source) -> str:
    """What the exported model takes, for the log."""
    examples = " (or serialized tf.train.Example records: serving_default(examples))" \
        if getattr(source, "parse_examples", None) else ""
    return describe(source.raw_spec) + examples
