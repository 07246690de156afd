"""The export check and its reference inputs: what an exported model must predict, and how close it must come.

An export (online/publish/) is checked on a few inputs as a reader sends them (the data's raw features),
against the trained model's predictions at the checkpoint it was written from; both are kept beside it in
`reference_predictions.npz`, so a reader can check what it loaded.
"""

from __future__ import annotations

import weakref

import numpy as np
import tensorflow as tf

from common.errors import Problem, UserError
from models.raw_export import lengths_name
from data import contract

TOLERANCE = 1e-4  # largest absolute difference allowed between trained and exported predictions


def check_export(trained: np.ndarray, exported: np.ndarray) -> float:
    """The largest difference between trained and exported predictions; beyond TOLERANCE it is an error."""
    largest = float(np.abs(trained - exported).max())
    if not largest <= TOLERANCE:  # also catches NaN
        raise UserError(Problem("export", f"{largest:.2e}", f"exported predictions differ from the trained model's "
                                f"by more than {TOLERANCE:.0e}", "the exported model is not the trained one: keep the "
                                "checkpoints and logs and report it"))
    return largest


def reference_inputs(split: tf.data.Dataset, count: int = 16):
    """The first `count` inputs of a split (a tensor, or a dict of them), to check that an exported model
    predicts as the trained one."""
    inputs, _ = next(iter(contract.batch(split, count).take(1)))
    return inputs


_PREDICT = weakref.WeakKeyDictionary()  # a model -> its prediction function, traced once


def predictions(model, inputs) -> np.ndarray:
    """`model`'s predictions on `inputs`, computed in one graph: an eager call of a model whose tables live on ps
    reads each table shard whole on its ps, which copies it there once sparse updates have touched it (the ps
    then holds its share twice); in a graph only the rows looked up are read."""
    if isinstance(model.input, dict) and isinstance(inputs, dict):
        inputs = {name: inputs[name] for name in model.input}  # what the model takes of the data's features
    if model not in _PREDICT:  # one trace for any batch: a new trace would wait for every task, a stopped one too
        signature = [tf.nest.map_structure(lambda tensor: tensor.type_spec, model.input)]
        _PREDICT[model] = tf.function(lambda features: model(features, training=False), input_signature=signature)
    try:
        return _PREDICT[model](inputs).numpy()
    except (TypeError, ValueError):  # inputs the declared specs do not fit as they are (e.g. another dtype)
        _PREDICT[model] = tf.function(lambda features: model(features, training=False))
        return _PREDICT[model](inputs).numpy()


def model_inputs(source, raw):
    """What the trained model takes for raw features `raw`: the source's preprocessing of them (or they)."""
    return source.preprocessing(raw) if source.preprocessing is not None else raw


def saved_inputs(inputs) -> dict[str, np.ndarray]:
    """Reference inputs as npz entries: `inputs`, or `inputs_<name>` for each input of a dict; a ragged input
    as its values and its row lengths per ragged level, `inputs_<name>_row_lengths` (the outer level),
    `inputs_<name>_row_lengths_1`, ...: what an export's `serving_default` takes, named without `inputs_`."""
    return {name: saved_array(tensor) for name, tensor in saved_entries(inputs).items()}


def saved_entries(inputs) -> dict[str, tf.Tensor]:
    """`saved_inputs`' entries as tensors (it runs in a function too)."""
    if not isinstance(inputs, dict):
        return {"inputs": inputs}
    entries = {}
    for name, tensor in inputs.items():
        if isinstance(tensor, tf.RaggedTensor):
            entries.update({f"inputs_{lengths_name(name, level)}": lengths
                            for level, lengths in enumerate(tensor.nested_row_lengths())})
            tensor = tensor.flat_values
        entries[f"inputs_{name}"] = tensor
    return entries


def loaded_inputs(saved) -> tf.Tensor | dict:
    """The inputs `saved_inputs` wrote into an .npz (opened as `saved`), as a tensor or a dict of (ragged) tensors;
    one written before deeper levels were kept has one level of row lengths, read as before."""
    if "inputs" in saved:
        return tf.constant(saved["inputs"])
    keys = [key for key in saved if key.startswith("inputs_")]
    lengths = {f"inputs_{lengths_name(key.removeprefix('inputs_'), level)}" for key in keys for level in range(8)}
    return {key.removeprefix("inputs_"): _tensor(saved, key.removeprefix("inputs_"))
            for key in keys if key not in lengths}


def _tensor(saved, name: str):
    values = tf.constant(saved[f"inputs_{name}"])
    levels = []
    while f"inputs_{lengths_name(name, len(levels))}" in saved:
        levels.append(saved[f"inputs_{lengths_name(name, len(levels))}"])
    return tf.RaggedTensor.from_nested_row_lengths(values, levels) if levels else values


def saved_array(tensor: tf.Tensor) -> np.ndarray:
    """Strings as fixed-width bytes, which np.load reads without pickle."""
    return tensor.numpy().astype(np.bytes_) if tensor.dtype == tf.string else tensor.numpy()
