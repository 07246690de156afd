"""The exported model takes the features as they are in the data: the data's own preprocessing in front of the model.

Whatever was trained (dlrm, wide_deep, a user model, with any tables) is wrapped, not rebuilt: `servable` puts a
RawFeatures layer, which runs the very Preprocessing object the training pipeline ran (data/preprocessing.py,
made again from its JSON config when the model is loaded), in front of it. So a serving system sends Criteo's
integers and hexadecimal strings, or a TFRecord schema's features, and the hashing happens inside the model.

The SavedModel's `serving_default` takes the raw features by name, as a REST client sends them in JSON: a
fixed-length feature as a tensor `[batch, ...]`, a variable-length (ragged) one as its values `<name>` (every
example's, one after another) and `<name>_row_lengths` (how many each example has; a feature ragged at deeper
levels adds `<name>_row_lengths_1`, ...), the layout of the reference inputs saved beside an export
(models/export.py). A source of serialized tf.train.Example records (`parse_examples`) also gets
`serving_examples(examples)`, a string vector parsed with the pipeline's own parsing. Other sources keep
Keras' own signature, by input name.
"""

from __future__ import annotations

import json

import tensorflow as tf
import tf_keras

from models.input_contract import keras_inputs
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


EXAMPLES_SIGNATURE = "serving_examples"


def lengths_name(name: str, level: int) -> str:
    """The name of a ragged feature's row lengths at `level` (0: how many values, or lists, each example has)."""
    return f"{name}_row_lengths" + (f"_{level}" if level else "")


def _flat_specs(spec: dict) -> dict:
    """Signature inputs for raw features `spec` (per example): each dense one batched, each ragged one as its
    values and its row lengths per ragged level."""
    flat = {}
    for name, one in spec.items():
        if not isinstance(one, tf.RaggedTensorSpec):
            flat[name] = tf.TensorSpec([None, *one.shape], one.dtype, name=name)
            continue
        levels = one.ragged_rank + 1  # per example ragged_rank, and the batch's own
        flat[name] = tf.TensorSpec([None, *one.shape[levels:]], one.dtype, name=name)
        flat.update({lengths_name(name, level): tf.TensorSpec([None], tf.int64, name=lengths_name(name, level))
                     for level in range(levels)})
    return flat


def _from_flat(spec: dict, flat: dict) -> dict:
    """The raw features (ragged where they are) from a signature's flat inputs."""
    return {name: tf.RaggedTensor.from_nested_row_lengths(
                flat[name], [flat[lengths_name(name, level)] for level in range(one.ragged_rank + 1)])
            if isinstance(one, tf.RaggedTensorSpec) else flat[name] for name, one in spec.items()}


def signatures(model: tf_keras.Model, source) -> dict | None:
    """The SavedModel's signatures: `serving_default` taking the raw features by name (ragged ones as values and
    row lengths), and `serving_examples` for a source of tf.train.Example records; None (Keras' own, by input
    name) for a source of dense features only, or of one tensor, that reads no records."""
    spec, parse = source.raw_spec, getattr(source, "parse_examples", None)
    ragged = isinstance(spec, dict) and any(isinstance(one, tf.RaggedTensorSpec) for one in spec.values())
    if not isinstance(spec, dict) or not (ragged or parse):
        return None

    @tf.function(input_signature=[_flat_specs(spec)])
    def serve_features(flat):
        return {OUTPUT: model(_from_flat(spec, flat), training=False)}

    found = {"serving_default": serve_features.get_concrete_function()}
    if parse is not None:
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def serve_examples(examples):
            return {OUTPUT: model(parse(examples), training=False)}

        found[EXAMPLES_SIGNATURE] = serve_examples.get_concrete_function()
    return found


def raw_description(source) -> str:
    """What the exported model takes, for the log."""
    examples = f" (or serialized tf.train.Example records: {EXAMPLES_SIGNATURE}(examples))" \
        if getattr(source, "parse_examples", None) else ""
    return describe(source.raw_spec) + examples
