"""A checkpoint's scores on a data set, with its tables read only where the data looks (online/publish/partial.py).

A model whose weights were all read whole evaluates as Keras does (`evaluate`); one whose tables stand in is
run on groups of GROUP_EXAMPLES examples (each group's rows read from the checkpoint, then scored), its loss and
compiled metrics accumulated as `evaluate` accumulates them.
"""

from __future__ import annotations

import tensorflow as tf

from models.compiled import build_loss_and_metrics

GROUP_EXAMPLES = 8192  # examples scored per read of rows: a few MB of rows for Criteo's 26 tables


def scores(partial, model, dataset: tf.data.Dataset) -> dict[str, float]:
    """The loss and metrics of PartialModel `partial` (around `model`, compiled with them) on batched `dataset`."""
    if partial.whole:
        build_loss_and_metrics(model, dataset.element_spec)  # before evaluate's step: it is traced once
        return {name: float(value) for name, value in model.evaluate(dataset, verbose=0, return_dict=True).items()}
    model.reset_metrics()
    for features, labels in dataset.unbatch().batch(GROUP_EXAMPLES):
        predictions = tf.constant(partial(features))
        model.compute_loss(features, labels, predictions)
        model.compute_metrics(features, labels, predictions, None)
    return {metric.name: float(metric.result()) for metric in model.metrics}
