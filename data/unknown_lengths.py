"""Features whose length tf.data does not know (`tf.pad(x, ...)[:6]` is `[None]`): the model's inputs decide.

Unknown is not variable. A dataset function's feature with a None axis in its `element_spec` (a tf.TensorSpec;
a tf.RaggedTensorSpec says the data varies) is batched as `model.fit` would: dense at the model's length when the
model's input declares every such axis (`Input(shape=(6,))`), ragged when it leaves one open (`(None,)`) or takes
the feature ragged. A dense feature is checked on every example: one of another length stops the run with one
line naming the feature (exit 2), where TensorFlow would fail the batch with its own message.
"""

from __future__ import annotations

import tensorflow as tf

from common.errors import Problem
from data import failures
from data.contract import normalized

MARKER = "pscluster: a feature is not the length the model takes"  # no quote: the error text escapes one


def unknown(spec) -> bool:
    """A tensor whose shape tf.data leaves partly unknown (a known rank, a None axis): not declared ragged."""
    return isinstance(spec, tf.TensorSpec) and spec.shape.rank is not None and not spec.shape.is_fully_defined()


def _named(spec) -> dict:
    """A dict spec as it is; one tensor as {None: spec}."""
    return dict(spec) if isinstance(spec, dict) else {None: spec}


def _model_shape(model_shape: list, rank: int) -> list | None:
    """The model's shape in the data's rank (Keras adds or drops a last axis of 1), or None when they differ."""
    if len(model_shape) == rank + 1 and model_shape[-1] == 1:
        return model_shape[:-1]
    if len(model_shape) + 1 == rank:
        return [*model_shape, 1]
    return model_shape if len(model_shape) == rank else None


def fixed_shapes(given, declared) -> dict:
    """{feature (None for one tensor): shape} for each feature of unknown length that the model's input (a
    per-example spec, `declared`: a dict by name, or one) takes dense with every unknown axis given."""
    takes, found = _named(declared), {}
    for name, spec in _named(given).items():
        wanted = takes.get(name) if isinstance(declared, dict) else declared
        if not unknown(spec) or not isinstance(wanted, tf.TensorSpec):
            continue
        shape = _model_shape(wanted.shape.as_list(), spec.shape.rank)
        if shape is None:
            continue
        merged = [data if data is not None else model for data, model in zip(spec.shape.as_list(), shape, strict=True)]
        agrees = all(model is None or model == data for data, model in zip(merged, shape, strict=True))
        if agrees and None not in merged:
            found[name] = merged
    return found


def fitted(given, fixed: dict):
    """The features a model receives: those in `fixed` dense at that shape, the other unknown ones ragged."""
    spec = normalized(given)
    if isinstance(spec, dict):
        return {name: tf.TensorSpec(fixed[name], one.dtype) if name in fixed else one for name, one in spec.items()}
    return tf.TensorSpec(fixed[None], spec.dtype) if None in fixed else spec


def note(given, fixed: dict) -> str:
    """For the log: how each feature of unknown length is batched ("" when none is)."""
    parts = [f"{name or 'the features'}: length unknown to tf.data, batched "
             + (f"dense {fixed[name]} as the model's input takes it" if name in fixed else "ragged")
             for name, spec in _named(given).items() if unknown(spec)]
    return "; ".join(parts)


def _checked(value: tf.Tensor, shape: list, where: str) -> tf.Tensor:
    found = tf.shape(value, out_type=tf.int64)
    fits = tf.reduce_all(tf.equal(found, tf.constant(shape, tf.int64)))
    said = tf.strings.join([f"{where}: ", tf.strings.reduce_join(tf.strings.as_string(found), separator=" x "),
                            f" value(s), not {' x '.join(map(str, shape))}"])
    with tf.control_dependencies([tf.debugging.Assert(fits, [MARKER, said])]):
        return tf.ensure_shape(tf.identity(value), shape)


def conformed(dataset: tf.data.Dataset, fixed: dict, pipeline: str) -> tf.data.Dataset:
    """`dataset` (features, label) with each feature of `fixed` checked and given its shape."""
    if not fixed:
        return dataset

    def conform(features, label):
        if not isinstance(features, dict):
            return _checked(features, fixed[None], f"{pipeline} features"), label
        return {name: _checked(value, fixed[name], f"{pipeline} feature {name}") if name in fixed else value
                for name, value in features.items()}, label

    return dataset.map(conform)


def _problem(where: str) -> Problem:
    return Problem("training.dataset", where, "is not the length the model's input declares (tf.data did not know "
                   "the feature's length, so the model's input fixed it)",
                   "give every example that length (pad or cut it), or declare the input's axis None (or "
                   "ragged=True) to take the feature ragged")


LENGTHS = failures.Failure(MARKER, _problem)
