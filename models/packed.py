"""An MLP whose kernels and biases are slices of one flat variable: one read and one gradient per step, not 2 per layer.

Under ParameterServerStrategy every variable a step reads is a separate transfer from its ps, and every
gradient a separate transfer back, each with its own round trip; a step of a small MLP is bound by those
round trips, not by bytes. Packing the MLP into one variable turns 2 x layers transfers into one each way.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tf_keras


def _glorot_blocks(shapes: list[tuple[int, int]], seed: int | None):
    """A callable initial value: each kernel Glorot-uniform, each bias zero, concatenated (runs on the ps)."""

    def initial_value(shape=None, dtype=tf.float32, **_):
        parts = []
        for number, (fan_in, fan_out) in enumerate(shapes):
            limit = float(np.sqrt(6.0 / (fan_in + fan_out)))
            block_seed = None if seed is None else seed + number
            parts += [tf.reshape(tf.random.uniform([fan_in, fan_out], -limit, limit, dtype, seed=block_seed), [-1]),
                      tf.zeros([fan_out], dtype)]
        return tf.concat(parts, axis=0)

    return initial_value


class PackedMLP(tf_keras.layers.Layer):
    """Dense layers of `widths` (ReLU between them; `final_activation` on the last), all in one variable."""

    def __init__(self, widths, *, final_activation: str | None = None, seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.widths, self.final_activation, self.seed = tuple(int(w) for w in widths), final_activation, seed

    def build(self, input_shape):
        fans = (int(input_shape[-1]), *self.widths)
        self.shapes = list(zip(fans[:-1], fans[1:], strict=True))
        size = sum(fan_in * fan_out + fan_out for fan_in, fan_out in self.shapes)
        self.packed = self.add_weight(name="packed", shape=(size,), dtype=tf.float32,
                                      initializer=_glorot_blocks(self.shapes, self.seed))
        super().build(input_shape)

    def call(self, x):
        weights = tf.convert_to_tensor(self.packed)  # one read of the whole variable
        offset = 0
        for number, (fan_in, fan_out) in enumerate(self.shapes):
            kernel = tf.reshape(weights[offset:offset + fan_in * fan_out], [fan_in, fan_out])
            bias = weights[offset + fan_in * fan_out:offset + fan_in * fan_out + fan_out]
            offset += fan_in * fan_out + fan_out
            x = tf.matmul(x, kernel) + bias
            last = number == len(self.shapes) - 1
            x = tf_keras.activations.get(self.final_activation)(x) if last else tf.nn.relu(x)
        return x

    def compute_output_shape(self, input_shape):
        return tf.TensorShape(input_shape)[:-1].concatenate([self.widths[-1]])

    def get_config(self):
        return {**super().get_config(), "widths": list(self.widths), "final_activation": self.final_activation,
                "seed": self.seed}
