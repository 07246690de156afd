"""The tutorial CNN at other widths, for measuring how cost grows with model size (`bench.workload.models:cnn_<size>`).

Nearly every parameter is in the Dense layer after the convolution (26 x 26 x 32 inputs): width 4 gives about
0.1 M parameters, 128 (the tutorial) 2.8 M, 512 11 M, 2048 44 M.
"""

from __future__ import annotations

import tf_keras
from tf_keras import layers


def _cnn(width: int, input_shape, num_classes):
    inputs = tf_keras.Input(shape=input_shape)
    x = layers.Conv2D(32, 3, activation="relu")(inputs)
    x = layers.Dense(width, activation="relu")(layers.Flatten()(x))
    return tf_keras.Model(inputs, layers.Dense(num_classes, activation="softmax")(x), name=f"cnn_{width}")


def cnn_0_1m(input_shape, num_classes):
    return _cnn(4, input_shape, num_classes)


def cnn_2_8m(input_shape, num_classes):
    return _cnn(128, input_shape, num_classes)


def cnn_11m(input_shape, num_classes):
    return _cnn(512, input_shape, num_classes)


def cnn_44m(input_shape, num_classes):
    return _cnn(2048, input_shape, num_classes)


SIZES = {"0.1M": "bench.workload.models:cnn_0_1m", "2.8M": "bench.workload.models:cnn_2_8m",
         "11M": "bench.workload.models:cnn_11m", "44M": "bench.workload.models:cnn_44m"}
