"""The model zoo (cnn, mlp, resnet, mobilenet_v2) and user models given as `package.module:function`."""

from __future__ import annotations

import tf_keras
from tf_keras import layers

from cluster import user_model
from cluster.training_options import TrainingOptions
from common.errors import Problem, UserError
from models import recommenders
from data import contract


def _as_image(inputs, input_shape):
    """Gives flat or 2-D inputs a channel axis so convolutional models accept any image source."""
    if len(input_shape) == 3:
        return inputs
    side = int(round(input_shape[0] ** 0.5)) if len(input_shape) == 1 else input_shape[0]
    width = input_shape[1] if len(input_shape) == 2 else side
    return layers.Reshape((side, width, 1))(inputs)


def cnn(input_shape, num_classes):
    """The small CNN of TensorFlow's multi-worker tutorial: Conv2D 32 → Flatten → Dense 128 → classes."""
    inputs = tf_keras.Input(shape=input_shape)
    x = layers.Conv2D(32, 3, activation="relu")(_as_image(inputs, input_shape))
    x = layers.Flatten()(x)
    x = layers.Dense(128, activation="relu")(x)
    return tf_keras.Model(inputs, layers.Dense(num_classes, activation="softmax")(x), name="cnn")


def mlp(input_shape, num_classes):
    """Two hidden dense layers over the flattened input."""
    inputs = tf_keras.Input(shape=input_shape)
    x = layers.Flatten()(inputs)
    x = layers.Dense(256, activation="relu")(x)
    x = layers.Dense(128, activation="relu")(x)
    return tf_keras.Model(inputs, layers.Dense(num_classes, activation="softmax")(x), name="mlp")


def _residual_block(x, filters, stride):
    shortcut = x
    y = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(x)
    y = layers.ReLU()(layers.BatchNormalization()(y))
    y = layers.Conv2D(filters, 3, padding="same", use_bias=False)(y)
    y = layers.BatchNormalization()(y)
    if stride != 1 or shortcut.shape[-1] != filters:
        shortcut = layers.BatchNormalization()(layers.Conv2D(filters, 1, strides=stride, use_bias=False)(x))
    return layers.ReLU()(layers.Add()([y, shortcut]))


def resnet(input_shape, num_classes):
    """A small ResNet for 32×32 images: three stages of two basic blocks (16, 32, 64 filters)."""
    inputs = tf_keras.Input(shape=input_shape)
    x = layers.Conv2D(16, 3, padding="same", use_bias=False)(_as_image(inputs, input_shape))
    x = layers.ReLU()(layers.BatchNormalization()(x))
    for stage, filters in enumerate((16, 32, 64)):
        x = _residual_block(x, filters, stride=1 if stage == 0 else 2)
        x = _residual_block(x, filters, stride=1)
    x = layers.GlobalAveragePooling2D()(x)
    return tf_keras.Model(inputs, layers.Dense(num_classes, activation="softmax")(x), name="resnet")


def mobilenet_v2(input_shape, num_classes):
    """MobileNetV2 backbone (weights=None) with a pooled dense head; small or grey images are adapted to it."""
    inputs = tf_keras.Input(shape=input_shape)
    x = _as_image(inputs, input_shape)
    if x.shape[1] < 32 or x.shape[2] < 32:
        x = layers.Resizing(max(32, x.shape[1]), max(32, x.shape[2]))(x)
    if x.shape[-1] != 3:
        x = layers.Conv2D(3, 1, name="to_rgb")(x)
    backbone = tf_keras.applications.MobileNetV2(input_shape=tuple(x.shape[1:]), include_top=False, weights=None)
    x = layers.GlobalAveragePooling2D()(backbone(x))
    x = layers.Dropout(0.2)(x)
    return tf_keras.Model(inputs, layers.Dense(num_classes, activation="softmax")(x), name="mobilenet_v2")


ZOO = {"cnn": cnn, "mlp": mlp, "resnet": resnet, "mobilenet_v2": mobilenet_v2}


def build(name: str, spec, num_classes: int | None, source_name: str = "the data") -> tf_keras.Model:
    """Builds the named model for features `spec` (data/contract.py); a user function gets input_shape,
    num_classes and feature_spec if it takes them."""
    if name in ZOO:
        if isinstance(spec, dict):
            raise UserError(Problem("training.model", name, f"takes one image tensor but {source_name} gives "
                                    f"{contract.describe(spec)}", "use dlrm, wide_deep or your own model "
                                    "(docs/your-data.md)"))
        return ZOO[name](contract.shapes(spec), num_classes)
    function = user_model.load(name)
    model = function(**user_model.keyword_arguments(function, input_shape=contract.shapes(spec),
                                                    num_classes=num_classes, feature_spec=spec))
    if not isinstance(model, tf_keras.Model):
        raise UserError(Problem("training.model", name, f"returned {type(model).__name__}, not a tf_keras model",
                                "build the model with `import tf_keras` (Keras 3 cannot train under "
                                "ParameterServerStrategy)"))
    return model


def make_optimizer(options: TrainingOptions):
    classes = {"adam": tf_keras.optimizers.Adam, "sgd": tf_keras.optimizers.SGD,
               "rmsprop": tf_keras.optimizers.RMSprop}
    return classes[options.optimizer](learning_rate=options.learning_rate)


def compile_model(model, options: TrainingOptions, **kwargs) -> None:
    """Compiles with the options' optimizer, loss and metrics (a user model's own optimizer and loss are kept;
    auc and log_loss, which Keras does not know by name, are made as for the click models)."""
    optimizer = model.optimizer if getattr(model, "optimizer", None) is not None else make_optimizer(options)
    loss = getattr(model, "loss", None) or options.loss
    metrics = [recommenders.click_metrics([name])[0] if name in recommenders.METRICS_FOR_CLICKS else name
               for name in options.metrics]
    model.compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)
