"""A fit that Keras ends before its last epoch without an error (its input said to have run out: a worker's iterator
once the worker came back from a host cut, seen in CI's cut tests) exits with the code that makes the launcher start
the chief again from its last checkpoint, as an epoch that ended short does; a fit of every epoch returns."""

from __future__ import annotations

import logging
import types

import pytest

from common.errors import CLUSTER_UNAVAILABLE_EXIT_CODE
from models.checkpoints import Position


def _fit(batches: int, epochs: int = 4, steps_per_epoch: int = 3):
    """coordinator.setup.fit of a one-layer model on `batches` batches (no repeat), under the default strategy."""
    import tensorflow as tf
    import tf_keras

    from coordinator import setup

    model = tf_keras.Sequential([tf_keras.layers.Dense(1, input_shape=(2,))])
    model.compile("sgd", "mse")
    run = types.SimpleNamespace(steps_per_epoch=steps_per_epoch, options=types.SimpleNamespace(epochs=epochs),
                                log=logging.getLogger("test_fit_ended_early"))

    def dataset_fn(step):
        return lambda context: tf.data.Dataset.from_tensor_slices(
            (tf.zeros([2 * batches, 2]), tf.zeros([2 * batches, 1]))).batch(2)

    return setup.fit(run, model, dataset_fn, [], Position(0))


def test_a_fit_whose_input_runs_out_before_its_last_epoch_exits_for_a_restart(caplog):
    with pytest.raises(SystemExit) as ended, caplog.at_level(logging.ERROR):
        _fit(batches=5)
    assert ended.value.code == CLUSTER_UNAVAILABLE_EXIT_CODE
    assert "fit ended after epoch 2 of 4, its input said to have run out (TensorFlow ended it without an error" \
        in caplog.text


def test_a_fit_of_every_epoch_returns_its_metrics():
    metrics, seconds = _fit(batches=12)
    assert "loss" in metrics and seconds > 0
