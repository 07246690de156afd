"""Fit's training step is traced once when the compiled loss's and metrics' variables are made before it: the same
metrics, the same values, one trace (coordinator/traced_once.py, models/compiled.py)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tf_keras

from coordinator.traced_once import MetricsBeforeTheFirstStep
from models.compiled import build_loss_and_metrics


def _model(outputs=1):
    tf_keras.utils.set_random_seed(1)
    inputs = tf_keras.Input((3,))
    hidden = tf_keras.layers.Dense(4)(inputs)
    heads = [tf_keras.layers.Dense(2, name=f"head{i}")(hidden) for i in range(outputs)]
    model = tf_keras.Model(inputs, heads[0] if outputs == 1 else heads)
    model.compile(tf_keras.optimizers.Adam(), tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy", "crossentropy"])
    model.optimizer.build(model.trainable_variables)
    return model


def _fit(model, outputs=1, first=False):
    x, y = np.random.default_rng(0).random((16, 3), "float32"), np.arange(16, dtype="int32") % 2
    labels = y if outputs == 1 else tuple([y] * outputs)

    def dataset_fn(context):
        return tf.data.Dataset.from_tensor_slices((x, labels)).batch(4)
    callback = MetricsBeforeTheFirstStep()
    made = callback.recording(dataset_fn) if first else dataset_fn
    history = model.fit(tf_keras.utils.experimental.DatasetCreator(made), steps_per_epoch=4, epochs=2, verbose=0,
                        callbacks=[callback] if first else [])
    return history.history, model.train_function.experimental_get_tracing_count()


def test_metrics_made_before_the_first_step_are_the_same_and_the_step_is_traced_once():
    for outputs in (1, 2):
        as_keras_does, traces = _fit(_model(outputs), outputs)
        first, once = _fit(_model(outputs), outputs, first=True)
        assert traces == 2 and once == 1, (outputs, traces, once)
        assert first.keys() == as_keras_does.keys() and any("accuracy" in name for name in first)
        for name, values in first.items():
            assert np.allclose(values, as_keras_does[name]), (name, values, as_keras_does[name])


def test_evaluate_after_the_build_traces_its_step_once_with_the_same_scores():
    x, y = np.random.default_rng(0).random((16, 3), "float32"), np.arange(16, dtype="int32") % 2
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    as_keras_does, built = _model(), _model()
    assert build_loss_and_metrics(built, dataset.element_spec)
    scores = [model.evaluate(dataset, verbose=0, return_dict=True) for model in (as_keras_does, built)]
    assert scores[0] == scores[1] and "accuracy" in scores[1]
    traces = [model.test_function.experimental_get_tracing_count() for model in (as_keras_does, built)]
    assert traces == [2, 1]


def test_a_subclassed_model_or_one_with_its_own_step_is_left_to_keras():
    class OwnStep(tf_keras.Model):
        def train_step(self, data):
            return super().train_step(data)

    spec = (tf.TensorSpec((None, 3)), tf.TensorSpec((None,), tf.int32))
    inputs = tf_keras.Input((3,))
    own = OwnStep(inputs, tf_keras.layers.Dense(2)(inputs))
    subclassed = tf_keras.Sequential([tf_keras.layers.Dense(2)])  # not built: its outputs are not known yet
    for model in (own, subclassed):
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
        assert not build_loss_and_metrics(model, spec) and not model.compiled_metrics._built
    assert build_loss_and_metrics(_model(), spec) is True
