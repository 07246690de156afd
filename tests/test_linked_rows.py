"""A version's table rows linked from its checkpoint's data files (online/publish/linked_rows.py), and the bundle
index they need (tables/streaming/bundle_index.py): what TensorFlow reads back, and the copy where a link cannot be."""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from tensorflow.python.ops import io_ops

import exportkit
from models.compiled import CUSTOM_OBJECTS
from online.publish.linked_rows import LinkedRows
from tables.streaming.bundle import BundleReader, BundleWriter
from tables.streaming.bundle_index import BundleIndex

DLRM = {"model": "dlrm", "dataset": "synthetic_criteo", "table_rows": 400, "embedding_dim": 4, "top_mlp": [8],
        "bottom_mlp": [8]}


def test_an_index_written_again_reads_back_the_same_tensors_whole_and_by_slices(tmp_path):
    prefix = str(tmp_path / "bundle")
    writer = BundleWriter(prefix)
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    writer.add("table", tf.constant(table[:6]), "10 4 0,6:-")
    writer.add("table", tf.constant(table[6:]), "10 4 6,4:-")
    writer.add("step", tf.constant(7, tf.int64))
    writer.finish()
    index = BundleIndex.read(prefix)
    assert index.header.num_shards == 3 and len(index.entries) == 4  # two slices, their tensor, the step
    Path(prefix + ".index").unlink()
    index.write(prefix)
    reader = BundleReader(prefix)
    np.testing.assert_array_equal(reader.whole("table").numpy(), table)
    np.testing.assert_array_equal(reader.rows("table", 4, 8).numpy(), table[4:8])
    assert reader.whole("step").numpy() == 7


def _predicts_as_trained(result, raw, expected):
    model = tf_keras.models.load_model(result.paths["saved_model"], custom_objects=CUSTOM_OBJECTS, compile=False)
    np.testing.assert_allclose(model(raw).numpy(), expected, atol=1e-6)


@pytest.mark.parametrize("training", [DLRM, {**DLRM, "embedding_kind": "dynamic", "embedding_capacity": 4000}],
                         ids=["hashed", "dynamic"])
def test_a_versions_rows_are_the_checkpoints_own_files_and_outlive_it(tmp_path, training):
    options, source, model = exportkit.trained(training)
    raw, expected, result = exportkit.exported(options, source, model, tmp_path, chunk_bytes=4096)
    variables = Path(result.paths["saved_model"]) / "variables"
    linked = [path for path in variables.glob("variables.data-*") if path.stat().st_nlink == 2]
    assert linked and result.linked_bytes == sum(path.stat().st_size for path in linked) > 0
    assert result.linked_bytes >= 0.9 * sum(path.stat().st_size for path in variables.glob("variables.data-*"))
    for path in tmp_path.glob("ckpt-1*"):
        path.unlink()  # the checkpoint goes, as a served version's checkpoint for serving does
    _predicts_as_trained(result, raw, expected)


def test_a_checkpoint_on_another_filesystem_is_copied_and_said_once(tmp_path, caplog):
    options, source, model = exportkit.trained(DLRM)
    elsewhere = Path(tempfile.mkdtemp(dir="/dev/shm"))
    assert elsewhere.stat().st_dev != tmp_path.stat().st_dev, "/dev/shm is on the same filesystem as the tests"
    try:
        with caplog.at_level(logging.WARNING):
            raw, expected, result = exportkit.exported(options, source, model, tmp_path, chunk_bytes=4096,
                                                       checkpoints=elsewhere)
    finally:
        shutil.rmtree(elsewhere)
    assert result.linked_bytes == 0
    said = [r.getMessage() for r in caplog.records if "copied into the version, not linked" in r.getMessage()]
    assert len(said) == 1 and "Invalid cross-device link" in said[0], said
    _predicts_as_trained(result, raw, expected)


def _bundle(prefix: str, table: np.ndarray, *, one_file: bool) -> None:
    """A checkpoint of `table` (as two slices, each a file of its own, or with everything in one file) and a step."""
    if one_file:
        io_ops.save_v2(prefix, ["step", "table"], ["", ""], [tf.constant(3, tf.int64), tf.constant(table)])
        return
    writer = BundleWriter(prefix)
    writer.add("table", tf.constant(table[:6]), "10 4 0,6:-")
    writer.add("table", tf.constant(table[6:]), "10 4 6,4:-")
    writer.add("step", tf.constant(3, tf.int64))
    writer.finish()


@pytest.mark.parametrize("one_file", [False, True], ids=["a file per slice", "one file for all"])
def test_rows_are_linked_under_the_new_key_only_from_files_that_hold_nothing_else(tmp_path, one_file):
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    _bundle(str(tmp_path / "ckpt"), table, one_file=one_file)
    version = tmp_path / "version"
    version.mkdir()
    linked = LinkedRows(str(tmp_path / "ckpt"), {"layer/embeddings": "table"}, version)
    assert linked.link() is None
    writer = BundleWriter(str(version / "small"))
    writer.add("layer/bias", tf.constant([1.0, 2.0]))
    if one_file:  # copied: its file holds the step too
        writer.add("layer/embeddings", tf.constant(table))
    writer.finish()
    linked.merge_into(str(version / "small"))
    assert linked.linked == (set() if one_file else {"layer/embeddings"})
    assert linked.bytes == (0 if one_file else table.nbytes)
    reader = BundleReader(str(version / "small"))
    assert sorted(reader.shapes) == ["layer/bias", "layer/embeddings"]
    np.testing.assert_array_equal(reader.whole("layer/embeddings").numpy(), table)
    np.testing.assert_array_equal(reader.rows("layer/embeddings", 5, 7).numpy(), table[5:7])
    np.testing.assert_array_equal(reader.whole("layer/bias").numpy(), [1.0, 2.0])


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32], ids=["float32", "int64", "int32"])
def test_rows_read_straight_from_the_data_files_are_the_rows_tensorflow_reads(tmp_path, dtype):
    """BundleReader.gather against TensorFlow's reads: slices of every width of OrderedCode numbers (starts past
    2**6, 2**13, 2**20), a whole tensor, the first and last rows; a string tensor is left to TensorFlow."""
    total = 1_100_000
    table = (np.arange(total * 3) % 1_000_003).astype(dtype).reshape(total, 3)
    prefix = str(tmp_path / "bundle")
    writer = BundleWriter(prefix)
    for begin, end in [(0, 50), (50, 9000), (9000, 1_050_000), (1_050_000, total)]:
        writer.add("table", tf.constant(table[begin:end]), f"{total} 3 {begin},{end - begin}:-")
    writer.add("whole", tf.constant(table[:100]))
    writer.add("names", tf.constant(["a", "b"]))
    writer.finish()
    reader = BundleReader(prefix)
    rows = np.array([0, 49, 50, 51, 8999, 9000, 700_001, 1_049_999, 1_050_000, total - 1])
    np.testing.assert_array_equal(reader.gather("table", rows), table[rows])
    np.testing.assert_array_equal(reader.gather("whole", np.array([0, 7, 99])), table[[0, 7, 99]])
    assert reader.gather("names", np.array([0])) is None
    for row in rows:
        np.testing.assert_array_equal(reader.rows("table", int(row), int(row) + 1).numpy()[0], table[row])
