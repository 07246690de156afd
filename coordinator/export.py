"""Whole-weight models from checkpoints, exported as .h5 (h5py), SavedModel and .keras for use with no cluster.

Partitioned variables cannot be saved to .h5 directly (two shards share a name) and an .h5 of shards does not
load into an unpartitioned model, so export restores the checkpoint into an unpartitioned copy of the model:
checkpoints store each sharded variable whole, whatever the partitioning.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import tensorflow as tf
import tf_keras

from common.errors import Problem, UserError
from coordinator import models
from cluster.training_options import TrainingOptions

TOLERANCE = 1e-4  # largest absolute difference allowed between trained and exported predictions
H5_NAME = "model.h5"
SAVED_MODEL_NAME = "saved_model"
KERAS_NAME = "model.keras"


def restore_whole(options: TrainingOptions, input_shape, num_classes: int, checkpoint_path: str, *,
                  device: str | None = None, io_device: str | None = None) -> tf_keras.Model:
    """An unpartitioned, compiled model holding the weights of `checkpoint_path`."""
    with tf.device(device) if device else contextlib.nullcontext():
        model = models.build(options.model, input_shape, num_classes)
        models.compile_model(model, options)
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


def export(model: tf_keras.Model, directory: Path) -> dict[str, str]:
    """Writes the three formats into `directory` and returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {"h5": directory / H5_NAME, "saved_model": directory / SAVED_MODEL_NAME, "keras": directory / KERAS_NAME}
    model.save(paths["h5"], save_format="h5")
    model.save(paths["saved_model"], save_format="tf")
    model.save(paths["keras"])
    return {name: str(path) for name, path in paths.items()}


def reference_inputs(split: tf.data.Dataset, count: int = 16) -> np.ndarray:
    """The first `count` inputs of a split, to check that an exported model predicts as the trained one."""
    return np.stack([x for x, _ in split.take(count).as_numpy_iterator()])
