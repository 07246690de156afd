"""dlrm and wide_deep: they learn the synthetic click signal, keep both optimizers in checkpoints, refuse dense
table settings, and over 2 real ps split their fused table evenly with a per-ps report of what each serves."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from clusterkit import ROOT, last_line_starting, run_python
from models import recommenders
from tables.sparse import check_tables_sparse, make_embedding_optimizer
from data import synthetic_criteo
from common.errors import UserError

SMALL = recommenders.RecommenderOptions(table_rows=2000, embedding_dim=8, top_mlp=(32,))


def _train(name: str, options=SMALL, steps: int = 150):
    tf_keras.utils.set_random_seed(0)
    source = synthetic_criteo.load(options.rows_per_table, seed=0)
    model = recommenders.build_and_compile(name, options, tf_keras.optimizers.Adam(1e-2), steps_per_execution=10)
    data = source.train_dataset_fn(256, 0)(tf.distribute.InputContext())
    model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)
    return model, model.evaluate(source.eval_dataset("validation", 1024), verbose=0, return_dict=True)


@pytest.mark.parametrize("name", ["dlrm", "wide_deep"])
def test_models_learn_the_click_signal(name):
    _, metrics = _train(name)
    assert set(metrics) == {"loss", "auc", "log_loss"}
    assert metrics["auc"] > 0.7


@pytest.mark.parametrize("fused, packed", [(True, True), (False, False)])
def test_only_tables_go_to_the_sparse_optimizer_and_both_are_checkpointed(tmp_path, fused, packed):
    options = recommenders.RecommenderOptions(**{**SMALL.__dict__, "fused_tables": fused, "packed_mlp": packed})
    model, _ = _train("dlrm", options, steps=20)
    tables, dense = model.split_variables()
    assert len(tables) == (1 if fused else 26) and len(dense) == (2 if packed else 8)  # 2 MLPs, 4 dense layers
    assert int(model.embedding_optimizer.iterations.numpy()) == int(model.optimizer.iterations.numpy()) == 20
    path = tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(str(tmp_path / "ckpt"))
    names = [name for name, _ in tf.train.list_variables(path)]
    assert sum("embedding_optimizer/accumulator" in n for n in names) == len(tables)
    assert sum(n.startswith("optimizer/_variables/") for n in names) >= 2 * len(dense)  # Adam's m and v


def test_dense_table_settings_are_refused_with_one_line():
    with pytest.raises(UserError, match="training.embedding_optimizer = 'adam': updates every row"):
        make_embedding_optimizer("adam", 0.1)
    with pytest.raises(UserError, match="embedding_optimizer"):
        recommenders.parse_recommender_options({"embedding_optimizer": "rmsprop"})
    inputs = tf_keras.Input((3,), dtype=tf.int64)
    regularized = tf_keras.layers.Embedding(10, 4, embeddings_regularizer="l2")(inputs)
    with pytest.raises(UserError, match="regularizes a whole embedding table"):
        check_tables_sparse(tf_keras.Model(inputs, regularized))


def test_options_are_checked_field_by_field():
    with pytest.raises(UserError) as raised:
        recommenders.parse_recommender_options({"table_rows": [5, 6], "embedding_dim": 0})
    assert len(raised.value.problems) == 2
    assert recommenders.parse_recommender_options({"table_rows": 7}).rows_per_table == (7,) * 26


CHIEF = """
import json, sys, numpy as np, tensorflow as tf, tf_keras
from models import recommenders
from tables.shard_report import shard_report
from data import synthetic_criteo
partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(min_shard_bytes=256 * 1024, max_shards=2)
strategy = tf.distribute.experimental.ParameterServerStrategy(
    tf.distribute.cluster_resolver.TFConfigClusterResolver(), variable_partitioner=partitioner)
options = recommenders.RecommenderOptions(table_rows=tuple(range(20000, 20026)), embedding_dim=8)
with strategy.scope():
    model = recommenders.build_and_compile("dlrm", options, tf_keras.optimizers.Adam(1e-3), steps_per_execution=5)
source = synthetic_criteo.load(options.rows_per_table)
model.fit(tf_keras.utils.experimental.DatasetCreator(source.train_dataset_fn(256, 0, workers=2)), epochs=1,
          steps_per_epoch=20, verbose=0)
features = next(iter(source.split("train").batch(256)))[0]
ids = features["ids"].numpy()
checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(
    sys.argv[1], options=tf.train.CheckpointOptions(experimental_io_device="/job:chief/replica:0/task:0/device:CPU:0"))
np.save(sys.argv[1] + "-predictions.npy", model(features, training=False).numpy())
shards = [(v.device, v.shape.as_list()) for v in model.get_layer("embeddings").table.variables]
print("RESULT " + json.dumps({"shards": shards, "report": shard_report(model, ids),
                              "steps": int(model.embedding_optimizer.iterations.numpy())}))
"""


@pytest.mark.cluster
def test_fused_table_splits_evenly_over_two_ps_with_a_report(shared_servers, tmp_path):
    spec = json.loads(shared_servers.read_text())["cluster"]
    tf_config = {"cluster": {job: spec[job] for job in ("chief", "worker", "ps")},
                 "task": {"type": "chief", "index": 0}}
    env = {"TF_CONFIG": json.dumps(tf_config), "TF_USE_LEGACY_KERAS": "1", "PYTHONPATH": str(ROOT),
           "GRPC_FAIL_FAST": "use_caller", "TF_CPP_MIN_LOG_LEVEL": "2"}
    run = run_python("-c", CHIEF, str(tmp_path / "ckpt"), env_changes=env)
    line = last_line_starting(run.stdout, "RESULT ")
    assert line, run.stderr[-3000:]
    result = json.loads(line[len("RESULT "):])
    assert [shape for _, shape in result["shards"]] == [[260_163, 8], [260_162, 8]]  # 520,325 rows halved
    assert sorted(device.split("/device")[0] for device, _ in result["shards"]) == [
        "/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"]
    report = result["report"]
    assert set(report) == {"ps:0", "ps:1"} and result["steps"] >= 20
    held = [report[ps]["bytes_held"] for ps in ("ps:0", "ps:1")]
    assert abs(held[0] - held[1]) / max(held) < 0.1  # table and accumulator halves, plus small dense variables
    lookups = [report[ps]["lookups_per_step"] for ps in ("ps:0", "ps:1")]
    assert all(lookups) and abs(lookups[0] - lookups[1]) / max(lookups) < 0.3  # salted ids: no hot ps
    assert np.sum(lookups) < 256 * 26  # de-duplicated
    _exports_as_the_chief_predicts(tmp_path)


def _exports_as_the_chief_predicts(tmp_path):
    """The split checkpoint restores into an unpartitioned model that predicts as the chief did, and the exporter
    writes it (tables a chunk at a time, 64 KiB chunks) in formats that predict the same."""
    from models import export
    from online.publish.exporter import export_checkpoint
    from online.publish.request import MODEL, ExportRequest

    options = recommenders.RecommenderOptions(table_rows=tuple(range(20000, 20026)), embedding_dim=8)
    whole = recommenders.build_and_compile("dlrm", options, tf_keras.optimizers.Adam(1e-3))
    tf.train.Checkpoint(model=whole, optimizer=whole.optimizer).read(str(tmp_path / "ckpt")).assert_consumed()
    source = synthetic_criteo.load(options.rows_per_table)
    features = next(iter(source.split("train").batch(256)))[0]
    expected = np.load(tmp_path / "ckpt-predictions.npy")
    np.testing.assert_allclose(whole(features).numpy(), expected, atol=1e-6)
    raw = export.reference_inputs(source.split("train", raw=True), count=256)
    np.savez(tmp_path / "reference.npz", predictions=expected, **export.saved_inputs(raw))
    training = {"model": "dlrm", "dataset": "synthetic_criteo", "table_rows": list(options.table_rows),
                "embedding_dim": 8, "stream_chunk_mb": 64 / 1024}
    result = export_checkpoint(ExportRequest(kind=MODEL, checkpoint=str(tmp_path / "ckpt"), options=training,
                                             destination=str(tmp_path / "model"),
                                             reference=str(tmp_path / "reference.npz")), logging.getLogger("test"))
    assert not result.error and result.largest < 1e-5, result
    for path in result.paths.values():
        again = tf_keras.models.load_model(path, custom_objects=recommenders.CUSTOM_OBJECTS, compile=False)
        np.testing.assert_allclose(again(features).numpy(), expected, atol=1e-6)


def test_balanced_partitioner_gives_every_ps_the_same_number_of_bounded_shards():
    from tables.placement import BalancedPartitioner

    partitioner = BalancedPartitioner(3, min_shard_bytes=1024, max_shard_bytes=1 << 20)
    assert partitioner((100, 2), tf.float32) == [1, 1]  # 800 bytes: whole
    assert partitioner((4096, 16), tf.float32) == [3, 1]  # 256 KiB: one shard per ps
    assert partitioner((100_000, 16), tf.float32) == [9, 1]  # 6.1 MiB: 3 shards of 0.7 MiB per ps
