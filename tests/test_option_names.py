"""The loss and metric names validation accepts (a static list, no TensorFlow import) are ones tf_keras resolves,
that run on the labels the data sets give, and that the evaluator reports as the best_metric names we allow."""

from __future__ import annotations

import os

import pytest

from cluster.crosschecks import valid_best_metrics
from cluster.training_options import TrainingOptions
from cluster.training_names import (LOSS_NAMES, METRIC_NAMES, ONE_HOT_LABEL_METRICS, ONE_HOT_LOSSES,
                                    SPARSE_LABEL_METRICS)

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf_keras = pytest.importorskip("tf_keras")
CLASSES = 10


def _labels_and_inputs(one_hot: bool):
    import numpy as np

    rng = np.random.default_rng(0)
    labels = rng.integers(0, CLASSES, 32)
    return rng.random((32, 4), dtype="float32"), np.eye(CLASSES)[labels] if one_hot else labels


def _evaluated(loss: str, metrics: tuple[str, ...]) -> dict:
    """tf_keras's own names for the results, as the evaluator reads them (evaluate with return_dict)."""
    inputs, labels = _labels_and_inputs(loss in ONE_HOT_LOSSES)
    model = tf_keras.Sequential([tf_keras.layers.Dense(CLASSES, activation="softmax", input_shape=(4,))])
    model.compile("sgd", loss=loss, metrics=list(metrics))
    model.fit(inputs, labels, epochs=1, batch_size=16, verbose=0)
    return model.evaluate(inputs, labels, verbose=0, return_dict=True)


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_each_loss_resolves(name):
    assert callable(tf_keras.losses.get(name))


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_each_metric_resolves(name):
    assert callable(tf_keras.metrics.get(name))


def test_listed_metrics_cover_both_label_formats():
    assert set(METRIC_NAMES) == set(SPARSE_LABEL_METRICS) | set(ONE_HOT_LABEL_METRICS)


@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_every_loss_trains_with_its_metrics_and_reports_the_allowed_names(loss):
    metrics = ONE_HOT_LABEL_METRICS if loss in ONE_HOT_LOSSES else SPARSE_LABEL_METRICS
    results = _evaluated(loss, metrics)
    reported = [f"val_{name}" for name in results]
    assert reported == valid_best_metrics(TrainingOptions(loss=loss, metrics=metrics))
