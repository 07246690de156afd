"""What a model receives from a data source, said in one line and given to a user model as `feature_spec`.

A source's features are one tensor (images: float32 [height, width, channels]) or a dict of named tensors; each
is described per example, without the batch axis, as a `tf.TensorSpec` or, for a variable-length feature, a
`tf.RaggedTensorSpec` (a batch of them is ragged [batch, None]): `batch` makes batches so, ragged only where
examples differ in length.
"""

from __future__ import annotations

import tensorflow as tf


def _one(spec) -> str:
    dims = ", ".join("None" if d is None else str(d) for d in spec.shape.as_list())
    ragged = " ragged" if isinstance(spec, tf.RaggedTensorSpec) else ""
    return f"{spec.dtype.name} [{dims}]{ragged}"


def describe(spec) -> str:
    """`float32 [28, 28, 1]`, or `dict {dense: float32 [13], ids: int64 [26]}` (per example)."""
    if isinstance(spec, dict):
        return "dict {" + ", ".join(f"{name}: {_one(spec[name])}" for name in sorted(spec)) + "}"
    return _one(spec)


def shapes(spec):
    """The `input_shape` a user model is given: the tensor's shape, or each feature's shape by name (a ragged
    feature's variable axis is None)."""
    if isinstance(spec, dict):
        return {name: tuple(spec[name].shape.as_list()) for name in spec}
    return tuple(spec.shape.as_list())


def _variable(spec) -> bool:
    return isinstance(spec, tf.TensorSpec) and not spec.shape.is_fully_defined()


def normalized(spec):
    """Features per example as a batch of them comes out of `batch`: a tensor of variable length is ragged."""
    return tf.nest.map_structure(
        lambda one: tf.RaggedTensorSpec(one.shape, one.dtype, 0, tf.int64) if _variable(one) else one, spec)


def batch(examples: tf.data.Dataset, size, drop_remainder: bool = False) -> tf.data.Dataset:
    """Batches of `size`; features that vary in length from one example to the next become ragged (int64 row
    splits, as Keras' ragged inputs take them), the others stay dense."""
    if any(_variable(one) for one in tf.nest.flatten(examples.element_spec)):
        return examples.ragged_batch(size, drop_remainder=drop_remainder, row_splits_dtype=tf.int64)
    return examples.batch(size, drop_remainder=drop_remainder)


def batched(spec):
    """The spec of a batch of such features (a leading None axis), as a model's inputs see them."""
    return tf.nest.map_structure(lambda one: one._batch(None), spec)
