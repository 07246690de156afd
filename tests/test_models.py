"""The model zoo and user models: each builds, compiles and takes a training step on the inputs it is meant for."""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf  # noqa: E402

from models import zoo  # noqa: E402
from models.compiled import build_loss_and_metrics  # noqa: E402
from cluster.training_options import TrainingOptions  # noqa: E402
from common.errors import UserError  # noqa: E402

USER_MODULE = """
import tf_keras

def tiny(input_shape, num_classes):
    inputs = tf_keras.Input(shape=input_shape)
    outputs = tf_keras.layers.Dense(num_classes, activation="softmax")(tf_keras.layers.Flatten()(inputs))
    model = tf_keras.Model(inputs, outputs, name="tiny")
    model.compile(optimizer=tf_keras.optimizers.SGD(0.5), loss="sparse_categorical_crossentropy")
    return model

def not_a_model():
    return 42
"""


def _images(shape) -> tf.TensorSpec:
    return tf.TensorSpec(shape, tf.float32)


def _one_step(model, input_shape, num_classes: int, eagerly: bool = False) -> float:
    import numpy as np

    zoo.compile_model(model, TrainingOptions())
    model.run_eagerly = eagerly
    images = np.random.default_rng(0).uniform(size=(4, *input_shape)).astype("float32")
    labels = np.arange(4) % num_classes
    model.optimizer.build(model.trainable_variables)  # as the chief builds them (models/compiled.py): one trace
    build_loss_and_metrics(model, (_images((None, *input_shape)), tf.TensorSpec([None], tf.int64)))
    return float(np.atleast_1d(model.train_on_batch(images, labels))[0])  # the loss (metrics follow it)


# MobileNetV2's step is traced once, on grey 8x8 images (resized and made RGB before the same backbone); on its own
# 32x32 RGB images the step runs eagerly: tracing its graph costs some 6 CPU-s (0.9 s eagerly), the same each time
@pytest.mark.parametrize("name,input_shape,eagerly", [("cnn", (8, 8), False), ("mlp", (8, 8), False),
                                                      ("resnet", (32, 32, 3), False),
                                                      ("mobilenet_v2", (32, 32, 3), True),
                                                      ("mobilenet_v2", (8, 8), False)])
def test_zoo_models_build_and_train_a_step(name, input_shape, eagerly):
    model = zoo.build(name, _images(input_shape), 10)
    assert model.output_shape == (None, 10)
    assert _one_step(model, input_shape, 10, eagerly) > 0


def test_user_model_keeps_its_own_optimizer_and_loss(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    model = zoo.build("my_models:tiny", _images((8, 8)), 3)
    _one_step(model, (8, 8), 3)
    assert model.name == "tiny" and type(model.optimizer).__name__ == "SGD"
    sys.modules.pop("my_models", None)


def test_user_model_mistakes_are_one_clear_line(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UserError) as raised:
        zoo.build("my_models:not_a_model", _images((8, 8)), 3)
    assert "returned int, not a tf_keras model" in raised.value.lines()[0]
    with pytest.raises(UserError) as raised:
        zoo.build("no_such_module:build", _images((8, 8)), 3)
    assert "training.model = 'no_such_module:build': module no_such_module is not importable" in \
        raised.value.lines()[0]
    sys.modules.pop("my_models", None)
