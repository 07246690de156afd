"""Bring your own data on loopback (2 ps, 2 workers): a dataset function (one feature of a length tf.data does not
know, which the model's input fixes) with a user model trained and exported,
TFRecords of click records through dlrm served by another program from their records and from their raw features
as JSON, a model refused before training when its inputs do not take the data."""

from __future__ import annotations

import json

import numpy as np
import pytest

import datakit
from clusterkit import ROOT, assert_no_traceback, derive_cluster, run_module, served_predictions

pytestmark = pytest.mark.cluster

SMALL = {"per_worker_batch": 32, "steps_per_epoch": 4, "steps_per_execution": 2, "epochs": 2, "lr_decay_epochs": [],
         "min_shard_bytes": 256}
BY_AUC = {"best_metric": "val_auc", "best_mode": "max"}
MINE = '''
import numpy as np
import tensorflow as tf
import tf_keras


def clicks(split, input_context):
    """Never reads input_context: the toolkit shards. `recent` is padded to 6 as TensorFlow's tutorials pad, which
    leaves tf.data without its length ([None])."""
    rng = np.random.default_rng(0 if split == "train" else 1)
    count = 512 if split == "train" else 64
    price, words = rng.normal(size=(count, 1)).astype("float32"), rng.integers(0, 5, size=(count, 2))
    label = ((price[:, 0] > 0) == (words[:, 0] > 2)).astype("float32")

    def padded(features, label):
        recent = features["words"][:1 + features["words"][1] % 2]
        return {**features, "recent": tf.pad(recent, [[0, 6 - tf.shape(recent)[0]]])[:6]}, label

    return tf.data.Dataset.from_tensor_slices(({"price": price, "words": words}, label)).map(padded)


def ctr(feature_spec):
    inputs = {name: tf_keras.Input(shape=spec.shape, dtype=spec.dtype, name=name)
              for name, spec in feature_spec.items()}
    inputs["recent"] = tf_keras.Input(shape=(6,), dtype="int64", name="recent")  # as model.fit takes it
    words = tf_keras.layers.Flatten()(tf_keras.layers.Embedding(5, 4)(inputs["words"]))
    recent = tf_keras.layers.Flatten()(tf_keras.layers.Embedding(5, 2)(inputs["recent"]))
    hidden = tf_keras.layers.Dense(8, activation="relu")(tf_keras.layers.Concatenate()([inputs["price"], words,
                                                                                       recent]))
    return tf_keras.Model(inputs, tf_keras.layers.Dense(1, activation="sigmoid")(hidden), name="ctr")


def flat(input_shape):
    inputs = tf_keras.Input(shape=(39,), name="flat")
    return tf_keras.Model(inputs, tf_keras.layers.Dense(1, activation="sigmoid")(inputs))
'''


@pytest.fixture
def mine(tmp_path):
    (tmp_path / "mine_ctr.py").write_text(MINE)
    return {"PYTHONPATH": str(tmp_path)}


def test_a_dataset_function_and_a_user_model_train_to_an_export(shared_servers, tmp_path, mine):
    output = tmp_path / "output"
    cluster = derive_cluster(shared_servers, tmp_path, evaluator=False, training={
        **SMALL, "model": "mine_ctr:ctr", "dataset": "mine_ctr:clicks", "loss": "binary_crossentropy",
        "metrics": ["auc"], "steps_per_epoch": None, "output_dir": str(output)}, evaluation=BY_AUC)
    trained = run_module("coordinator.train", "--cluster", str(cluster), timeout_s=300, env=mine)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "mine_ctr:clicks: 512 training examples" in trained.stderr and "8 steps per epoch" in trained.stderr
    assert "sharded by element: mine_ctr:clicks does not read input_context" in trained.stderr
    assert "recent: length unknown to tf.data, batched dense [6] as the model's input takes it" in trained.stderr
    assert "export check" in trained.stderr
    report = tmp_path / "evaluated.json"
    evaluated = run_module("evaluator.sidecar", "--cluster", str(cluster), "--model", str(output / "model" /
                           "model.keras"), "--output_json", str(report), timeout_s=180, env=mine)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert 0.0 <= json.loads(report.read_text())["metrics"]["validation_auc"] <= 1.0


def test_a_model_whose_inputs_do_not_take_the_data_is_refused_before_training(shared_servers, tmp_path, mine):
    output = tmp_path / "output"
    cluster = derive_cluster(shared_servers, tmp_path, evaluator=False, training={
        **SMALL, "model": "mine_ctr:flat", "dataset": "synthetic_criteo", "loss": "binary_crossentropy",
        "metrics": ["auc"], "synthetic_examples": 512, "output_dir": str(output)}, evaluation=BY_AUC)
    refused = run_module("coordinator.train", "--cluster", str(cluster), timeout_s=300, env=mine)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert_no_traceback(refused.stderr)
    [line] = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert "training.model = 'mine_ctr:flat': takes float32 [39] (input flat) but synthetic_criteo gives dict " \
           "{dense: float32 [13], ids: int64 [26]} (flat: not in the data)" in line, line
    assert not list((output / "checkpoints").glob("ckpt-*"))


def test_click_tfrecords_train_dlrm_and_the_export_serves_their_records(shared_servers, tmp_path):
    data, output = tmp_path / "clicks", tmp_path / "output"
    datakit.write_click_records(data, {"train": [200, 200], "validation": [100]})
    cluster = derive_cluster(shared_servers, tmp_path, evaluator=False, training={
        **SMALL, "epochs": 1, "model": "dlrm", "dataset": "tfrecord", "data_dir": str(data), "output_dir": str(output),
        "tfrecord_features": datakit.CLICK_SCHEMA, "numeric_features": datakit.CLICK_NUMERIC,
        "categorical_features": datakit.CLICK_CATEGORICAL, "table_rows": 64, "embedding_dim": 4, "bottom_mlp": [8],
        "top_mlp": [8]})
    trained = run_module("coordinator.train", "--cluster", str(cluster), timeout_s=300)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "sharded by file: 2 training files over 2 workers" in trained.stderr
    summary = json.loads((output / "summary.json").read_text())
    assert summary["status"] == "complete" and set(summary["final_metrics"]) >= {"auc", "log_loss"}
    reference = np.load(output / "model" / "reference_predictions.npz")
    assert set(reference) >= {"inputs_tags", "inputs_tags_row_lengths", "inputs_country", "inputs_price"}
    served = served_predictions(output / "model" / "saved_model", "examples",
                                data / "validation-00000-of-00001", 16)
    assert np.abs(served - reference["predictions"].reshape(-1)).max() <= 1e-4
    request = tmp_path / "request.json"  # the reference inputs as a REST client sends them: named raw features
    request.write_text(json.dumps({key.removeprefix("inputs_"): _json(value) for key, value in reference.items()
                                   if key.startswith("inputs_")}))
    served = served_predictions(output / "model" / "saved_model", "features", request, None)
    assert np.abs(served - reference["predictions"].reshape(-1)).max() <= 1e-4
    documented = (ROOT / "docs" / "your-data.md").read_text().split("```json\n", 1)[1].split("```")[0]
    request.write_text(json.dumps(json.loads(documented)["inputs"]))  # the page's own request, as it stands
    served = served_predictions(output / "model" / "saved_model", "features", request, None)
    assert served.shape == (2,) and np.all((served >= 0) & (served <= 1)), served


def _json(values: np.ndarray) -> list:
    """An array as JSON holds it (strings as text)."""
    return np.char.decode(values, "utf-8").tolist() if values.dtype.kind == "S" else values.tolist()
