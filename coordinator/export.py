"""Whole-weight models from checkpoints, exported as .h5 (h5py), SavedModel and .keras for use with no cluster.

Partitioned variables cannot be saved to .h5 directly (two shards share a name) and an .h5 of shards does not
load into an unpartitioned model, so export restores the checkpoint into an unpartitioned copy of the model:
checkpoints store each sharded variable whole, whatever the partitioning. Given the data source, the exported
model takes the features as they are in the data (coordinator/raw_export.py).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import tensorflow as tf
import tf_keras

from common.errors import Problem, UserError
from cluster.training_options import TrainingOptions
from coordinator.compiled import build_compiled, exportable
from coordinator.raw_export import servable, signatures
from data import contract

TOLERANCE = 1e-4  # largest absolute difference allowed between trained and exported predictions
H5_NAME = "model.h5"
SAVED_MODEL_NAME = "saved_model"
KERAS_NAME = "model.keras"


def restore_whole(options: TrainingOptions, source, checkpoint_path: str, *, device: str | None = None,
                  io_device: str | None = None) -> tf_keras.Model:
    """An unpartitioned, compiled model (for the features of data source `source`) holding the weights of
    `checkpoint_path`."""
    with tf.device(device) if device else contextlib.nullcontext():
        model = build_compiled(options, source)
    read_options = tf.train.CheckpointOptions(experimental_io_device=io_device) if io_device else None
    restore_every_weight(model, checkpoint_path, read_options)
    return model


def restore_every_weight(model: tf_keras.Model, checkpoint_path: str, options=None) -> None:
    """Restores the model's weights, failing with one line when any is missing from the checkpoint (it would
    keep its initial value); the optimizer's slots in the checkpoint are not needed here."""
    try:
        tf.train.Checkpoint(model=model).read(checkpoint_path, options=options) \
            .assert_existing_objects_matched().expect_partial()
    except (AssertionError, ValueError) as error:
        raise UserError(Problem("checkpoint", checkpoint_path, "does not hold every weight of the model "
                                f"({str(error).splitlines()[0][:200]})", "check that training.model is the model "
                                "that wrote this checkpoint")) from None


def check_export(trained: np.ndarray, exported: np.ndarray) -> float:
    """The largest difference between trained and exported predictions; beyond TOLERANCE it is an error."""
    largest = float(np.abs(trained - exported).max())
    if not largest <= TOLERANCE:  # also catches NaN
        raise UserError(Problem("export", f"{largest:.2e}", f"exported predictions differ from the trained model's "
                                f"by more than {TOLERANCE:.0e}", "the exported model is not the trained one: keep the "
                                "checkpoints and logs and report it"))
    return largest


def export(model: tf_keras.Model, directory: Path, source=None) -> dict[str, str]:
    """Writes the three formats into `directory` and returns their paths: the model without its training parts,
    taking the features as they are in data source `source` (when given and it has preprocessing)."""
    model = servable(exportable(model), source)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {"h5": directory / H5_NAME, "saved_model": directory / SAVED_MODEL_NAME, "keras": directory / KERAS_NAME}
    model.save(paths["h5"], save_format="h5")
    model.save(paths["saved_model"], save_format="tf", signatures=signatures(model, source))
    model.save(paths["keras"])
    return {name: str(path) for name, path in paths.items()}


def reference_inputs(split: tf.data.Dataset, count: int = 16):
    """The first `count` inputs of a split (a tensor, or a dict of them), to check that an exported model
    predicts as the trained one."""
    inputs, _ = next(iter(contract.batch(split, count).take(1)))
    return inputs


def model_inputs(source, raw):
    """What the trained model takes for raw features `raw`: the source's preprocessing of them (or they)."""
    return source.preprocessing(raw) if source.preprocessing is not None else raw


def saved_inputs(inputs) -> dict[str, np.ndarray]:
    """Reference inputs as npz entries: `inputs`, or `inputs_<name>` for each input of a dict; a ragged input
    as its values and `inputs_<name>_row_lengths`."""
    if not isinstance(inputs, dict):
        return {"inputs": _array(inputs)}
    entries = {}
    for name, tensor in inputs.items():
        if isinstance(tensor, tf.RaggedTensor):
            entries[f"inputs_{name}_row_lengths"] = tensor.row_lengths().numpy()
            tensor = tensor.flat_values
        entries[f"inputs_{name}"] = _array(tensor)
    return entries


def _array(tensor: tf.Tensor) -> np.ndarray:
    """Strings as fixed-width bytes, which np.load reads without pickle."""
    return tensor.numpy().astype(np.bytes_) if tensor.dtype == tf.string else tensor.numpy()
