"""Fit's training step traced once: the loss's and metrics' variables are made before Keras traces the step."""

from __future__ import annotations

import tf_keras

from models.compiled import build_loss_and_metrics


class MetricsBeforeTheFirstStep(tf_keras.callbacks.Callback):
    """Keras makes a metric named in compile ("accuracy") in the first trace of its training step, where the labels'
    and predictions' shapes pick which one it is; TensorFlow then traces the step a second time. This callback
    notes the batches' spec as fit makes its dataset (`recording`) and builds the loss and metrics for it when
    training begins, before the step is first traced (models/compiled.py); without a spec it does nothing."""

    def __init__(self):
        super().__init__()
        self.element_spec = None

    def recording(self, dataset_fn):
        """`dataset_fn` (input context -> dataset), noting the spec of what it makes."""
        def made(context):
            dataset = dataset_fn(context)
            self.element_spec = dataset.element_spec
            return dataset
        return made

    def on_train_begin(self, logs=None):
        if self.element_spec is not None:
            build_loss_and_metrics(self.model, self.element_spec)
