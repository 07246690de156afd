"""Data sources on small generated files: contents, shapes, exactly-once sharding, and each bad input as one line."""

from __future__ import annotations

import collections
import gzip
import json
import shutil
import types
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.distribute.coordinator import coordinator_context

import datakit
from clusterkit import assert_no_traceback, cluster_document, derive_cluster, run_module, write_cluster
from cluster.training_options import TrainingOptions
from data import augment, load_source, preflight, source_for
from data.corrupt import undecodable_records_named
from common.errors import UserError

SMALL = (8, 8)
FOLDER_COUNTS = {"train": {"cat": 5, "dog": 4, "owl": 3}, "validation": {"cat": 2, "dog": 2, "owl": 1},
                 "test": {"cat": 1, "dog": 2, "owl": 1}}


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, tuple[Path, dict[str, list[tuple[bytes, int]]]]]:
    """Each format written once: its data_dir and, per split, (fingerprint, label) of every example in file order."""
    root = tmp_path_factory.mktemp("data")
    folders = datakit.write_image_folders(root / "folders", FOLDER_COUNTS, size=SMALL)
    cifar = datakit.write_cifar(root / "cifar")
    idx = datakit.write_idx(root / "idx_gz", gz=True)
    datakit.write_idx(root / "idx_raw", gz=False)
    npz = datakit.write_npz(root / "npz" / "mnist.npz")
    records = datakit.write_tfrecords(root / "tfrecord", {"train": [5, 4, 3], "validation": [4], "test": [3]})

    def pairs(images, labels):
        return [(datakit.fingerprint(np.asarray(i) / 255), int(l)) for i, l in zip(images, labels)]

    classes = sorted(FOLDER_COUNTS["train"])
    cifar_train = [pair for name in sorted(cifar) if name != "test_batch.bin" for pair in cifar[name]]
    return {
        "image_folder": (root / "folders", {split: pairs(*zip(*[(image, classes.index(name))
                                                              for name in classes for image in per_class[name]]))
                                            for split, per_class in folders.items()}),
        "cifar10": (root / "cifar", {"train+validation": pairs(*zip(*[(i, l) for l, i in cifar_train])),
                                     "test": pairs(*zip(*[(i, l) for l, i in cifar["test_batch.bin"]]))}),
        "mnist_gz": (root / "idx_gz", {"train+validation": pairs(*idx["train"]), "test": pairs(*idx["t10k"])}),
        "mnist_raw": (root / "idx_raw", {"train+validation": pairs(*idx["train"]), "test": pairs(*idx["t10k"])}),
        "mnist_npz": (root / "npz", {"train+validation": pairs(npz["x_train"], npz["y_train"]),
                                     "test": pairs(npz["x_test"], npz["y_test"])}),
        "tfrecord": (root / "tfrecord", {split: pairs(images, [i % 3 for c in counts for i in range(c)])
                                         for (split, images), counts in zip(records.items(), ([5, 4, 3], [4], [3]))}),
    }


def open_source(kind: str, written, **settings):
    directory = written[kind][0]
    return load_source(kind.split("_")[0] if kind.startswith("mnist") else kind, str(directory),
                       image_size=SMALL, **settings)


def examples(dataset: tf.data.Dataset) -> list[tuple[bytes, int]]:
    return [(datakit.fingerprint(image), int(label)) for image, label in dataset.as_numpy_iterator()]


def first_pass(dataset: tf.data.Dataset) -> list[tuple[bytes, int]]:
    """An endless training stream's examples up to the first one seen again: one pass over its shard."""
    seen = []
    for image, labels in dataset.unbatch().as_numpy_iterator():
        example = (datakit.fingerprint(image), int(labels))
        if example in seen:
            return seen
        seen.append(example)
    raise AssertionError("the stream ended: training datasets must repeat")


def assert_disjoint_cover(passes: list[list], everything: list) -> None:
    flat = [example for one in passes for example in one]
    assert collections.Counter(flat) == collections.Counter(everything)
    assert len(set(flat)) == len(flat), "an example reached two workers, or one worker twice in a pass"


FORMATS = ["image_folder", "cifar10", "mnist_gz", "mnist_raw", "mnist_npz", "tfrecord"]


@pytest.mark.parametrize("kind", FORMATS)
def test_splits_hold_exactly_what_was_written(written, kind):
    source = open_source(kind, written)
    expected = written[kind][1]
    splits = {split: examples(source.split(split)) for split in ("train", "validation", "test")}
    assert {split: len(found) for split, found in splits.items()} == dict(source.sizes)
    if "train+validation" in expected:  # no validation split shipped: the last 10% of training records, in order
        everything = expected["train+validation"]
        carved = len(everything) // 10
        assert splits["validation"] == everything[-carved:]
        assert sorted(splits["train"]) == sorted(everything[:-carved])
    else:
        for split in ("train", "validation"):
            assert sorted(splits[split]) == sorted(expected[split])
    assert sorted(splits["test"]) == sorted(expected["test"])


@pytest.mark.parametrize("kind,shape,classes", [
    ("image_folder", (8, 8, 3), 3), ("cifar10", (32, 32, 3), 10), ("mnist_gz", (28, 28, 1), 10),
    ("mnist_npz", (28, 28, 1), 10), ("tfrecord", (8, 8, 3), 3)])
def test_shapes_and_classes(written, kind, shape, classes):
    source = open_source(kind, written)
    assert (source.input_shape, source.num_classes) == (shape, classes)
    images, labels = next(iter(source.eval_dataset("test", 4)))
    assert images.shape[1:] == shape and images.dtype == tf.float32 and labels.dtype == tf.int32
    assert 0.0 <= float(tf.reduce_min(images)) and float(tf.reduce_max(images)) <= 1.0


def test_synthetic_data_has_the_shape_and_size_asked_for():
    options = TrainingOptions(dataset="synthetic", synthetic_shape=(6, 5, 2), synthetic_examples=100)
    source = source_for(options, Path("."))
    assert source.input_shape == (6, 5, 2) and source.sizes["train"] == 100
    images, labels = next(iter(source.eval_dataset("validation", 8)))
    assert images.shape == (8, 6, 5, 2) and labels.shape == (8,)
    assert len(examples(source.split("train"))) == 100


@pytest.mark.parametrize("kind,workers", [(k, 2) for k in FORMATS] + [("image_folder", 3), ("cifar10", 3),
                                                                       ("cifar10", 7), ("tfrecord", 4)])
def test_workers_together_see_each_training_example_once_per_pass(written, kind, workers):
    source = open_source(kind, written)
    passes = [first_pass(source.train_dataset_fn(global_batch=2 * workers, seed=5)(
        tf.distribute.InputContext(num_input_pipelines=workers, input_pipeline_id=index,
                                   num_replicas_in_sync=workers))) for index in range(workers)]
    assert_disjoint_cover(passes, examples(source.split("train")))


@pytest.mark.parametrize("kind", ["cifar10", "mnist_npz", "image_folder"])
def test_under_parameter_server_strategy_each_worker_reads_its_own_shard(written, kind):
    """As ParameterServerStrategy does it: dataset_fn traced once with a one-pipeline context, then run per worker."""
    source = open_source(kind, written)
    dataset_fn = source.train_dataset_fn(global_batch=4, seed=0, workers=3)
    tf.random.set_seed(0)  # the chief sets one; a global seed of 0 breaks tensor shuffle seeds in TensorFlow 2.21
    try:
        traced = tf.function(lambda: dataset_fn(tf.distribute.InputContext())).get_concrete_function()
    finally:
        tf.random.set_seed(None)
    passes = []
    for index in range(3):
        with coordinator_context.with_dispatch_context(types.SimpleNamespace(worker_index=index)):
            passes.append(first_pass(traced()))
    assert_disjoint_cover(passes, examples(source.split("train")))


def test_the_sharding_policy_is_said(written):
    cifar = open_source("cifar10", written)
    assert cifar.sharding(2) == "sharded by file: 5 training files over 2 workers"
    assert cifar.sharding(6) == ("sharded by element (5 training file(s) for 6 workers): each worker reads every "
                                 "example and keeps 1 in 6")
    assert "held in memory" in open_source("mnist_npz", written).sharding(2)


@pytest.mark.parametrize("loss,label_shape", [("categorical_crossentropy", (6, 3)),
                                              ("sparse_categorical_crossentropy", (6,))])
def test_labels_are_one_hot_when_the_loss_wants_them(written, loss, label_shape):
    options = TrainingOptions(dataset="tfrecord", data_dir=written["tfrecord"][0].name, image_size=SMALL, loss=loss)
    source = source_for(options, written["tfrecord"][0].parent)
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1)
    _, train_labels = next(iter(source.train_dataset_fn(6, 0)(context)))
    _, eval_labels = next(iter(source.eval_dataset("validation", 6)))
    assert tuple(train_labels.shape) == label_shape
    assert tuple(eval_labels.shape) == (4, *label_shape[1:])


@pytest.mark.parametrize("image_format", ["png", "bmp", "gif", "jpg"])
def test_each_image_format_decodes_to_its_pixels(tmp_path, image_format):
    images = datakit.write_image_folders(tmp_path, {s: {"only": 2} for s in ("train", "validation", "test")},
                                         size=(6, 10), image_format=image_format)
    source = load_source("image_folder", str(tmp_path), image_size=(6, 10))
    decoded = [image for image, _ in source.split("test").as_numpy_iterator()]
    for index, (found, written_image) in enumerate(zip(decoded, images["test"]["only"])):
        wanted = written_image / 255
        if image_format == "gif":  # a grey GIF of the first channel
            wanted = np.repeat(wanted[:, :, :1], 3, axis=2)
        if image_format == "jpg":  # lossy: what TensorFlow's decoder makes of the file
            wanted = tf.io.decode_jpeg((tmp_path / "Test" / "only" / f"{index}.jpg").read_bytes()).numpy() / 255
        assert found.shape == (6, 10, 3)
        assert np.allclose(found, wanted, atol=1e-6)


def test_images_are_resized_to_image_size(written):
    source = load_source("image_folder", str(written["image_folder"][0]), image_size=(5, 12))
    assert source.input_shape == (5, 12, 3)
    assert next(iter(source.split("train")))[0].shape == (5, 12, 3)


def test_augmentation_moves_images_reproducibly_and_keeps_shapes(written):
    images = tf.random.stateless_uniform([4, 16, 16, 3], [1, 2])
    assert np.allclose(augment.transform(images, tf.eye(3, batch_shape=[4])), images)  # identity map: unchanged
    first = augment.random_augment(images, tf.constant([3, 0], tf.int64))
    assert np.allclose(first, augment.random_augment(images, tf.constant([3, 0], tf.int64)))
    assert not np.allclose(first, augment.random_augment(images, tf.constant([3, 1], tf.int64)))
    assert not np.allclose(first, images) and first.shape == images.shape
    assert 0.0 <= float(tf.reduce_min(first)) and float(tf.reduce_max(first)) <= 1.0

    source = open_source("cifar10", written, augment=True)
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1)
    batch, labels = next(iter(source.train_dataset_fn(8, 0)(context)))
    assert batch.shape == (8, 32, 32, 3) and labels.shape == (8,)


# --- bad input: one line naming the file and the fix --------------------------------------------------------

def without(path: Path) -> None:
    for child in sorted(path.rglob("*"), reverse=True):
        child.rmdir() if child.is_dir() else child.unlink()
    path.rmdir()


def truncate(path: Path, size: int) -> None:
    path.write_bytes(path.read_bytes()[:size])


def image_folder_case(change):
    def make(root: Path):
        datakit.write_image_folders(root, FOLDER_COUNTS, size=(4, 4))
        change(root)
        return "image_folder", root
    return make


def cifar_case(change):
    def make(root: Path):
        datakit.write_cifar(root)
        change(root / "cifar-10-batches-bin")
        return "cifar10", root
    return make


def mnist_case(change, gz=True):
    def make(root: Path):
        datakit.write_idx(root, gz=gz)
        change(root)
        return "mnist", root
    return make


def idx_with_one_label_less(root: Path) -> None:
    raw = bytearray(gzip.decompress((root / "train-labels-idx1-ubyte.gz").read_bytes()))
    raw[4:8] = (19).to_bytes(4, "big")
    (root / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(bytes(raw[:-1])))


# (case id, writes a data set and spoils it -> (dataset, data_dir), what the one line says, the path it names)
PREFLIGHT_CASES = [
    ("missing data_dir", lambda root: ("cifar10", root / "nowhere"), "does not exist; give the directory that holds",
     "nowhere"),
    ("missing training folder", image_folder_case(lambda r: without(r / "Train")),
     "has no training folder (train/ or Train/); create train/", "tfr"),
    ("validation split named twice", image_folder_case(lambda r: shutil.copytree(r / "Validate", r / "val")),
     "holds 2 validation folders (Validate, val); keep one", "tfr"),
    ("split without class folders", image_folder_case(lambda r: [without(d) for d in (r / "Test").iterdir()]),
     "has no class sub-folders", "Test"),
    ("empty class folder", image_folder_case(lambda r: [p.unlink() for p in (r / "Validate" / "dog").iterdir()]),
     "holds no jpg, png, bmp or gif image; add images of that class", "Validate/dog"),
    ("class missing from Validate", image_folder_case(lambda r: without(r / "Validate" / "owl")),
     "is missing: class 'owl' is in Train/ but not in Validate/; add Validate/owl/ with its images, or remove "
     "Train/owl/", "Validate/owl"),
    ("class only in Test", image_folder_case(lambda r: datakit.write_image_folders(r, {"test": {"emu": 1}})),
     "class 'emu' is in Test/ but not in Train/", "Test/emu"),
    ("truncated CIFAR batch", cifar_case(lambda d: truncate(d / "data_batch_3.bin", 3073 * 8 - 10)),
     "is 24574 bytes, not a whole number of 3073-byte records", "data_batch_3.bin"),
    ("missing CIFAR test batch", cifar_case(lambda d: (d / "test_batch.bin").unlink()),
     "does not exist; extract cifar-10-binary.tar.gz", "test_batch.bin"),
    ("idx labels under the images name", mnist_case(lambda r: shutil.copy(r / "t10k-labels-idx1-ubyte.gz",
                                                                          r / "t10k-images-idx3-ubyte.gz")),
     "starts with magic number 2049, not 2051 (idx images)", "t10k-images-idx3-ubyte.gz"),
    ("truncated idx file", mnist_case(lambda r: truncate(r / "train-images-idx3-ubyte", 1000), gz=False),
     "holds 1000 bytes where its header promises 15696: it is truncated", "train-images-idx3-ubyte"),
    ("gzipped idx cut short", mnist_case(lambda r: truncate(r / "train-images-idx3-ubyte.gz", 2000)),
     "where its header promises 15696: it is truncated", "train-images-idx3-ubyte.gz"),
    ("idx labels and images disagree", mnist_case(idx_with_one_label_less),
     "holds 19 labels for 20 images in train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    ("missing idx file", mnist_case(lambda r: (r / "train-labels-idx1-ubyte.gz").unlink()),
     "does not exist (nor its .gz)", "train-labels-idx1-ubyte"),
    ("npz without MNIST arrays", lambda root: datakit.write_npz(root / "mnist.npz", keys=("x", "y")) and
     ("mnist", root),
     "lacks the arrays x_train, y_train, x_test, y_test", "mnist.npz"),
    ("no validation TFRecords", lambda root: (datakit.write_tfrecords(root, {"train": [2]}), ("tfrecord", root))[1],
     "has no validation-* files; put the validation TFRecord files there", "tfr"),
]


@pytest.mark.parametrize("case_id,make,expected,named", PREFLIGHT_CASES, ids=[c[0] for c in PREFLIGHT_CASES])
def test_preflight_gives_one_line_naming_the_file_and_the_fix(tmp_path, case_id, make, expected, named):
    dataset, data_dir = make(tmp_path / "tfr")
    with pytest.raises(UserError) as raised:
        preflight(TrainingOptions(dataset=dataset, data_dir=str(data_dir)), tmp_path)
    lines = raised.value.lines()
    assert len(lines) == 1, lines
    assert expected in lines[0] and named in lines[0]


def test_a_file_data_set_needs_data_dir(tmp_path):
    with pytest.raises(UserError, match="training.data_dir = None: cifar10 reads files but no directory is set"):
        preflight(TrainingOptions(dataset="cifar10"), tmp_path)


@pytest.mark.parametrize("spoil,expected", [
    (lambda files: truncate(files[1], files[1].stat().st_size - 3), "is truncated: record 2 runs past the end"),
    (lambda files: files[0].write_bytes(b""), "the test split is empty: its 1 file"),
])
def test_tfrecord_framing_is_checked_before_training(tmp_path, spoil, expected):
    datakit.write_tfrecords(tmp_path, {"train": [2, 4], "validation": [2], "test": [1]})
    spoil(sorted(tmp_path.glob("t*-*")))  # test-00000, train-00000, train-00001
    with pytest.raises(UserError, match=expected):
        load_source("tfrecord", str(tmp_path), image_size=SMALL)


def test_wrong_tfrecord_feature_key_lists_the_ones_there(tmp_path):
    datakit.write_tfrecords(tmp_path, {"train": [2], "validation": [1]}, image_key="image/png")
    with pytest.raises(UserError) as raised:
        load_source("tfrecord", str(tmp_path), image_size=SMALL)
    assert raised.value.lines()[0].startswith(
        "error: training.tfrecord_image_key = 'image/encoded': is not a bytes_list feature")
    assert raised.value.lines()[0].endswith("use one of: image/class/label, image/png")


def corrupt_folder(root: Path, count: int = 1) -> list[Path]:
    """Image folders with `count` corrupt files in Train/dog, next to each other in file order (so with 2 workers
    sharding by file, each worker's shard holds one of two)."""
    datakit.write_image_folders(root, FOLDER_COUNTS, size=SMALL)
    bad = [root / "Train" / "dog" / f"broken{number}.jpg" for number in range(count)]
    for path in bad:
        path.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    return bad


def test_a_corrupt_image_stops_the_pipeline_naming_it(tmp_path):
    [bad] = corrupt_folder(tmp_path)
    source = load_source("image_folder", str(tmp_path), image_size=SMALL)
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1)
    with pytest.raises(UserError) as raised, undecodable_records_named():
        list(source.train_dataset_fn(4, 0)(context).take(20))
    assert raised.value.lines() == [
        f"error: data file = '{bad}': cannot be decoded (corrupt, or not jpg, png, bmp or gif); replace or delete "
        "it, or set training.skip_corrupt to true to skip such files"]


def test_skip_corrupt_drops_and_counts_them(tmp_path, capfd):
    [bad] = corrupt_folder(tmp_path)
    source = load_source("image_folder", str(tmp_path), image_size=SMALL, skip_corrupt=True)
    assert len(examples(source.split("train"))) == source.sizes["train"] - 1
    assert f'warning: skipped "{bad}" (cannot be decoded as an image); 1 skipped so far in this pass' \
        in capfd.readouterr().err


# --- through the real entrypoint: data checked before the cluster is probed ---------------------------------

@pytest.mark.parametrize("make,expected", [
    (cifar_case(lambda d: truncate(d / "data_batch_2.bin", 100)), "data_batch_2.bin': is 100 bytes"),
    (image_folder_case(lambda r: without(r / "Validate" / "cat")), "Validate/cat': is missing: class 'cat'"),
])
def test_chief_exits_2_with_one_line_before_probing_the_cluster(tmp_path, make, expected):
    dataset, data_dir = make(tmp_path / "data")
    cluster = write_cluster(tmp_path, cluster_document(evaluator=False, training={
        "dataset": dataset, "data_dir": str(data_dir), "probe_timeout_s": 30}))
    result = run_module("coordinator.train", "--cluster", str(cluster), timeout_s=60)
    assert result.returncode == 2, result.stderr
    assert_no_traceback(result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1 and expected in result.stderr


@pytest.mark.cluster
def test_chief_trains_from_mnist_files_sharded_over_the_workers(shared_servers, tmp_path):
    datakit.write_idx(tmp_path / "mnist", train=200, test=20)
    output = tmp_path / "output"
    cluster = derive_cluster(shared_servers, tmp_path, evaluator=False, training={
        "dataset": "mnist", "data_dir": str(tmp_path / "mnist"), "model": "mlp", "epochs": 2,
        "per_worker_batch": 8, "steps_per_execution": 1, "output_dir": str(output)})
    result = run_module("coordinator.train", "--cluster", str(cluster), timeout_s=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert ("mnist: 180 training examples; batch 16 per step (per_worker_batch 8 x 2 workers); each step runs on one "
            "worker, which computes all 16 examples, and the workers take steps in turn; 11 steps per epoch"
            ) in result.stderr
    assert "mnist: sharded by element (1 training file(s) for 2 workers)" in result.stderr
    summary = json.loads((output / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["optimizer_steps"] == 22


@pytest.mark.cluster
def test_a_corrupt_image_met_on_a_worker_is_one_line_and_exit_2(shared_servers, tmp_path):
    bad = corrupt_folder(tmp_path / "folders", count=2)
    cluster = derive_cluster(shared_servers, tmp_path, evaluator=False, training={
        "dataset": "image_folder", "data_dir": str(tmp_path / "folders"), "image_size": list(SMALL),
        "model": "mlp", "epochs": 2, "per_worker_batch": 4, "steps_per_execution": 1,
        "output_dir": str(tmp_path / "output")})
    result = run_module("coordinator.train", "--cluster", str(cluster), timeout_s=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert_no_traceback(result.stderr)
    assert result.stderr.strip().splitlines()[-1] in [
        f"error: data file = '{path}': cannot be decoded (corrupt, or not jpg, png, bmp or gif); replace or delete "
        "it, or set training.skip_corrupt to true to skip such files" for path in bad]
    assert "sharded by file: 14 training files over 2 workers" in result.stderr
    assert "ERROR:tensorflow" not in result.stderr

