"""A model's inputs against what the data gives (data/contract.py): Keras inputs made from it, and a mismatch refused.

A model may leave features of a dict unused; each input it has must be a feature of the data (by name, or the
one tensor), of the data's kind (text, or numbers: Keras casts one number type to another) and of its shape (a
None axis of the model takes any size; Keras adds or drops a last axis of 1). A ragged feature (the data's
length varies) goes to a ragged input, or to a dense one whose axes are None where the data's are (Keras hands it
on ragged, as `model.fit` does); a dense feature never to a ragged input.
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras

from common.errors import Problem, UserError
from data.contract import describe

FIX = ("build the model's inputs from the feature_spec argument the chief passes (one tf_keras.Input per feature, "
       "see docs/your-data.md), or use data that has those features")


def keras_inputs(spec, names=None) -> dict:
    """One tf_keras.Input per feature of a dict spec (`names`: those features only), ragged where the data is."""
    return {name: tf_keras.Input(shape=spec[name].shape, dtype=spec[name].dtype, name=name,
                                 ragged=isinstance(spec[name], tf.RaggedTensorSpec))
            for name in (names or spec)}


def _per_example(tensor) -> tf.TypeSpec:
    """A model input's spec without its batch axis."""
    spec = tensor.type_spec
    if isinstance(spec, tf.RaggedTensorSpec):
        return tf.RaggedTensorSpec(spec.shape[1:], spec.dtype, spec.ragged_rank - 1, spec.row_splits_dtype)
    return tf.TensorSpec(spec.shape[1:], spec.dtype)


def _shapes_fit(model_shape: list, data_shape: list) -> bool:
    if len(data_shape) == len(model_shape) + 1 and data_shape[-1] == 1:
        data_shape = data_shape[:-1]
    elif len(model_shape) == len(data_shape) + 1 and model_shape[-1] == 1:
        model_shape = model_shape[:-1]
    return len(model_shape) == len(data_shape) and all(m is None or m == d
                                                       for m, d in zip(model_shape, data_shape, strict=True))


def _mismatch(takes, gives) -> str | None:
    """Why a model input `takes` (a per-example spec) cannot take the feature `gives`, or None."""
    ragged_input, ragged_data = isinstance(takes, tf.RaggedTensorSpec), isinstance(gives, tf.RaggedTensorSpec)
    if ragged_input and not ragged_data:
        return "not ragged"
    if ragged_data and not ragged_input and not _shapes_fit(takes.shape.as_list(), gives.shape.as_list()):
        return "ragged (its length varies)"
    if (takes.dtype == tf.string) != (gives.dtype == tf.string):
        return f"{gives.dtype.name}, not {takes.dtype.name}"
    if not _shapes_fit(takes.shape.as_list(), gives.shape.as_list()):
        return f"shape {gives.shape.as_list()}, not {takes.shape.as_list()}"
    return None


def _feature_reason(name: str, wanted, spec: dict) -> str | None:
    if name not in spec:
        return f"{name}: not in the data"
    why = _mismatch(wanted, spec[name])
    return why and f"{name}: the data's is {why}"


def taken_inputs(model: tf_keras.Model, dict_data: bool):
    """The model's inputs per example: a dict by name when the data is a dict (or the model has several)."""
    specs = [_per_example(tensor) for tensor in model.inputs]
    if dict_data or len(specs) > 1:
        return dict(zip(model.input_names, specs, strict=True))
    return specs[0]


def problem(model: tf_keras.Model, spec, *, model_name: str, source_name: str) -> Problem | None:
    """One line naming what the model takes and what the data gives, when the model cannot take the data."""
    takes = taken_inputs(model, isinstance(spec, dict))
    if isinstance(spec, dict) and isinstance(takes, dict):
        reasons = [_feature_reason(name, wanted, spec) for name, wanted in takes.items()]
    elif isinstance(spec, dict) or isinstance(takes, dict):
        reasons = ["one tensor against a dict"]
    else:
        why = _mismatch(takes, spec)
        reasons = [why and f"the data's is {why}"]
    reasons = [reason for reason in reasons if reason]
    if not reasons:
        return None
    return Problem("training.model", model_name, f"takes {_described(model, takes)} but {source_name} gives "
                   f"{describe(spec)} ({'; '.join(reasons)})", FIX)


def _described(model: tf_keras.Model, takes) -> str:
    """The model's inputs as built: a dict, or one tensor (named, since Keras also finds it in a dict by name)."""
    if isinstance(model.input, dict) or len(model.inputs) > 1:
        return describe(takes)
    one = takes[model.input_names[0]] if isinstance(takes, dict) else takes
    return f"{describe(one)} (input {model.input_names[0]})"


def check(model: tf_keras.Model, spec, *, model_name: str, source_name: str) -> None:
    """Refuses (UserError, one line) a model whose inputs do not take the data's features."""
    found = problem(model, spec, model_name=model_name, source_name=source_name)
    if found:
        raise UserError(found)
