"""Serving versions on disk: increasing integers, written under a hidden name and renamed, the newest kept."""

from __future__ import annotations

import json

import numpy as np

from coordinator.serving import EXTRA, REFERENCE, TRAINED_THROUGH, ServingVersions


def tiny_model():
    import tf_keras

    inputs = tf_keras.Input((3,))
    return tf_keras.Model(inputs, tf_keras.layers.Dense(1)(inputs))


def test_versions_increase_past_pruned_ones_and_a_half_written_one_is_cleared(tmp_path):
    (tmp_path / ".writing-9").mkdir(parents=True)  # a write that died midway
    versions = ServingVersions(tmp_path, keep=2)
    assert not (tmp_path / ".writing-9").exists()
    import tensorflow as tf

    model, inputs = tiny_model(), tf.ones((2, 3))
    for _ in range(3):
        number, path = versions.write(model, describe=lambda v, t: {"version": v, "written": t}, inputs=inputs,
                                      predictions=model(inputs).numpy())
    assert (number, versions.versions()) == (3, [2, 3])  # the oldest pruned
    assert json.loads((path / EXTRA / TRAINED_THROUGH).read_text())["version"] == 3
    assert set(np.load(path / EXTRA / REFERENCE)) == {"inputs", "predictions"}
    assert versions.write(model, describe=lambda v, t: {}, inputs=inputs, predictions=inputs.numpy())[0] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["3", "4"]
