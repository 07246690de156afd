"""What a model receives from a data source, said in one line and given to a user model as `feature_spec`.

A source's features are one tensor (images: float32 [height, width, channels]) or a dict of named tensors; each
is described per example, without the batch axis, as a `tf.TensorSpec` or, for a variable-length feature, a
`tf.RaggedTensorSpec` (a batch of them is ragged [batch, None]).
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


def batched(spec):
    """The spec of a batch of such features (a leading None axis), as a model's inputs see them."""
    return tf.nest.map_structure(lambda one: one._batch(None), spec)
