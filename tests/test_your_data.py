"""Bring your own data: the options' one-line mistakes, the model contract, a dataset function's sharding and
problems, a TFRecord schema's checks, and one preprocessing function for the pipeline and the export."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

import criteokit  # noqa: E402
import datakit  # noqa: E402
from cluster.training_parse import parse_training_options  # noqa: E402
from common.errors import UserError  # noqa: E402
from models import export, input_contract, raw_export, sources, zoo  # noqa: E402
from data import bad_records_named, load_source, user_pipeline  # noqa: E402
from data.criteo_splits import criteo_files  # noqa: E402
from data import criteo  # noqa: E402

SCHEMA = {"training": {"model": "dlrm", "dataset": "tfrecord", "tfrecord_features": datakit.CLICK_SCHEMA,
                       "numeric_features": datakit.CLICK_NUMERIC, "categorical_features": datakit.CLICK_CATEGORICAL}}


@pytest.mark.parametrize("changes, expected", [
    ({"tfrecord_features": {**datakit.CLICK_SCHEMA, "price": {"dtype": "float64"}}},
     "training.tfrecord_features.price.dtype = 'float64': is not a tf.train.Example type; use one of int64, "
     "float32, string"),
    ({"tfrecord_features": {**datakit.CLICK_SCHEMA, "price": {"dtype": "float32", "label": True}},
      "numeric_features": ["visits"]}, "marks 2 features as the label, not one"),
    ({"numeric_features": ["price", "colour"]}, "training.numeric_features = 'colour': is not a feature of "
                                                "training.tfrecord_features"),
    ({"numeric_features": ["visits"], "categorical_features": ["country", "price"]},
     "training.categorical_features = 'price': is float32, which a categorical feature cannot be"),
    ({"categorical_features": None}, "training.categorical_features = None: dlrm needs the categorical features "
                                     "named"),
    ({"table_rows": [8, 8]}, "training.table_rows = [8, 8]: gives 2 sizes for 3 categorical features"),
    ({"dataset": "criteo"}, "training.tfrecord_features = '{...}': describes TFRecord files, but dataset is criteo"),
    ({"dataset": "my data"}, "training.dataset = 'my data': unknown dataset"),
])
def test_each_schema_mistake_is_one_line(changes, expected):
    with pytest.raises(UserError) as raised:
        parse_training_options({**SCHEMA["training"], **changes})
    assert len(raised.value.lines()) == 1 and expected in raised.value.lines()[0], raised.value.lines()


def test_a_dataset_function_with_a_zoo_model_needs_the_classes_and_a_schema_needs_no_zoo_model():
    with pytest.raises(UserError) as raised:
        parse_training_options({"model": "mlp", "dataset": "mine.data:pipeline"})
    assert raised.value.lines() == ["error: training.num_classes = None: mlp needs the number of classes of "
                                    "mine.data:pipeline's labels; give training.num_classes"]
    assert parse_training_options({"model": "mlp", "dataset": "mine.data:pipeline", "num_classes": 3})
    assert parse_training_options({"model": "mine.models:ctr", "dataset": "mine.data:pipeline",
                                   "loss": "binary_crossentropy", "metrics": ["auc"]})
    with pytest.raises(UserError) as raised:
        parse_training_options({**SCHEMA["training"], "model": "cnn", "numeric_features": None,
                                "categorical_features": None})
    assert "cannot read tfrecord's numeric and categorical features" in raised.value.lines()[0]


class _Zero(tf_keras.layers.Layer):
    def call(self, inputs):
        return tf.zeros([1, 1])


def _model(inputs) -> tf_keras.Model:
    """A model with these inputs (what it computes does not matter here)."""
    return tf_keras.Model(inputs, _Zero()(inputs))


CRITEO = {"dense": tf.TensorSpec([13], tf.float32), "ids": tf.TensorSpec([26], tf.int64)}
TAGS = {"tags": tf.RaggedTensorSpec([None], tf.string, ragged_rank=0, row_splits_dtype=tf.int64)}  # they vary


@pytest.mark.parametrize("inputs, said", [
    (lambda: tf_keras.Input((39,), name="flat"), "takes float32 [39] (input flat) but criteo gives dict {dense: "
                                                 "float32 [13], ids: int64 [26]} (flat: not in the data)"),
    (lambda: {"dense": tf_keras.Input((13,), name="dense"), "ids": tf_keras.Input((39,), dtype=tf.int64, name="ids")},
     "(ids: the data's is shape [26], not [39])"),
    (lambda: {"dense": tf_keras.Input((13,), name="dense"), "day": tf_keras.Input((1,), name="day")},
     "(day: not in the data)"),
    (lambda: {"ids": tf_keras.Input((26,), dtype=tf.string, name="ids")}, "(ids: the data's is int64, not string)"),
    (lambda: {"ids": tf_keras.Input((None,), dtype=tf.int64, ragged=True, name="ids")},
     "(ids: the data's is not ragged)"),
])
def test_a_model_that_cannot_take_the_data_is_one_line_naming_both(inputs, said):
    problem = input_contract.problem(_model(inputs()), CRITEO, model_name="mine:ctr", source_name="criteo")
    assert problem.field == "training.model" and said in problem.text(), problem.text()
    assert "feature_spec" in problem.text()


def test_a_model_built_from_feature_spec_takes_the_data():
    model = _model(input_contract.keras_inputs(CRITEO))
    assert input_contract.problem(model, CRITEO, model_name="mine:ctr", source_name="criteo") is None
    open_input = _model({"tags": tf_keras.Input((None,), dtype=tf.string, name="tags")})  # Keras hands it on ragged
    assert input_contract.problem(open_input, TAGS, model_name="mine:ctr", source_name="tfrecord") is None
    fixed = _model({"tags": tf_keras.Input((6,), dtype=tf.string, name="tags")})  # the data says it varies
    assert "(tags: the data's is ragged (its length varies))" in input_contract.problem(
        fixed, TAGS, model_name="mine:ctr", source_name="tfrecord").text()
    one = tf.TensorSpec([8, 8, 1], tf.float32)  # Keras drops or adds a last axis of 1, and casts numbers
    assert input_contract.problem(_model(tf_keras.Input((8, 8))), one, model_name="m", source_name="s") is None


PIPELINES = '''
import tensorflow as tf

def _numbers(split):
    count = 40 if split == "train" else 8
    return tf.data.Dataset.from_tensor_slices(({"x": tf.range(count, dtype=tf.float32)[:, None]},
                                               tf.zeros([count])))

def ignores(split, input_context):
    return _numbers(split)

def shards(split, input_context):
    data = _numbers(split)
    return data if input_context is None else data.shard(input_context.num_input_pipelines,
                                                         input_context.input_pipeline_id)

def only_train(split, input_context):
    return _numbers(split).repeat() if split == "train" else None

def a_list(split, input_context):
    return [1, 2]

def no_context(split):
    return _numbers(split)
'''


@pytest.fixture
def pipelines(tmp_path, monkeypatch):
    (tmp_path / "my_pipelines.py").write_text(PIPELINES)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_pipelines"
    sys.modules.pop("my_pipelines", None)


LENGTHS = '''
import tensorflow as tf
import tf_keras


def padded(split, input_context):
    """The tutorial's shape: ids padded to 6, whose static length tf.pad with a computed amount loses ([None])."""
    def example(n):
        words = tf.range(n, dtype=tf.int64) + 1
        words = tf.pad(words, [[0, 6 - tf.shape(words)[0]]])[:6]
        return {"words": words, "price": tf.cast(n, tf.float32)[None]}, tf.cast(n > 3, tf.float32)
    return tf.data.Dataset.from_tensor_slices(tf.constant([2, 5, 3, 6] * 4)).map(example)


def uneven(split, input_context):
    """One example in four has 7 words."""
    return padded(split, input_context).map(lambda features, label: (
        {**features, "words": tf.pad(features["words"], [[0, tf.cast(features["price"][0] > 5, tf.int32)]])},
        label))


def _model(words, pooled):
    price = tf_keras.Input(shape=(1,), name="price")
    vectors = tf_keras.layers.Embedding(8, 2)(words)
    x = tf_keras.layers.Concatenate()([pooled(vectors), price])
    return tf_keras.Model({"words": words, "price": price}, tf_keras.layers.Dense(1, activation="sigmoid")(x))


def six(feature_spec):
    return _model(tf_keras.Input(shape=(6,), dtype=tf.int64, name="words"), tf_keras.layers.Flatten())


def any_length(feature_spec):
    return _model(tf_keras.Input(shape=(None,), dtype=tf.int64, name="words"),
                  tf_keras.layers.GlobalAveragePooling1D())
'''


@pytest.fixture
def lengths(tmp_path, monkeypatch):
    (tmp_path / "my_lengths.py").write_text(LENGTHS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_lengths"
    sys.modules.pop("my_lengths", None)


@pytest.mark.parametrize("model, spec, batched", [
    ("six", tf.TensorSpec([6], tf.int64), tf.Tensor),
    ("any_length", tf.RaggedTensorSpec([None], tf.int64, ragged_rank=0, row_splits_dtype=tf.int64), tf.RaggedTensor),
])
def test_a_feature_of_unknown_length_is_batched_as_the_models_input_declares(lengths, model, spec, batched):
    source = user_pipeline.load(f"{lengths}:padded", declared_inputs=sources.declared_by(f"{lengths}:{model}"))
    assert source.feature_spec["words"] == spec, source.feature_spec
    assert "words: length unknown to tf.data, batched" in source.note
    built = zoo.build(f"{lengths}:{model}", source.feature_spec, None, source.name)
    assert input_contract.problem(built, source.feature_spec, model_name=model, source_name=source.name) is None
    features, labels = next(iter(source.eval_dataset("train", 8)))
    assert isinstance(features["words"], batched) and features["words"].shape[0] == 8
    built.compile(loss="binary_crossentropy")
    assert np.isfinite(built.train_on_batch(features, labels))  # as model.fit takes them


def test_a_feature_whose_length_then_differs_from_the_models_is_one_line_naming_it(lengths):
    source = user_pipeline.load(f"{lengths}:uneven", declared_inputs=sources.declared_by(f"{lengths}:six"))
    with pytest.raises(UserError) as raised, bad_records_named():
        list(source.eval_dataset("train", 8))
    assert raised.value.lines() == [
        f"error: training.dataset = '{lengths}:uneven feature words: 7 value(s), not 6': is not the length the "
        "model's input declares (tf.data did not know the feature's length, so the model's input fixed it); give "
        "every example that length (pad or cut it), or declare the input's axis None (or ragged=True) to take the "
        "feature ragged"]


@pytest.mark.parametrize("function, itself", [("ignores", False), ("shards", True)])
def test_every_worker_gets_its_own_shard_whether_or_not_the_function_shards(pipelines, function, itself):
    source = user_pipeline.load(f"{pipelines}:{function}")
    assert source.shards_itself is itself and source.sizes == {"train": 40, "validation": 8}
    assert source.steps_per_epoch(16) == 2 and source.feature_spec == {"x": tf.TensorSpec([1], tf.float32)}
    shards = [[int(x["x"][0]) for x, _ in source._shard(2, k, one_process=False)] for k in range(2)]
    assert sorted(shards[0] + shards[1]) == list(range(40)) and not set(shards[0]) & set(shards[1])
    assert ("by element" in source.sharding(2)) is not itself


@pytest.mark.parametrize("function, said", [
    ("only_train", ["training.steps_per_epoch = None: my_pipelines:only_train's training split has no known size",
                    "returns None for 'validation', which the evaluator reads"]),
    ("a_list", ["training.dataset = 'my_pipelines:a_list': returned list for 'train', not a tf.data.Dataset"]),
    ("no_context", ["cannot be called as function(split, input_context)"]),
    ("missing", ["has no function missing; name a function of that module that returns a tf.data.Dataset"]),
])
def test_a_dataset_function_the_chief_could_not_use_is_said_before_anything_starts(pipelines, function, said):
    lines = [p.text() for p in user_pipeline.problems(f"{pipelines}:{function}", None, evaluator=True)]
    assert len(lines) == len(said) and all(part in line for part, line in zip(said, lines, strict=True)), lines


def test_a_record_off_the_schema_is_one_line_naming_file_record_and_feature(tmp_path):
    datakit.write_click_records(tmp_path, {"train": [6]})
    with tf.io.TFRecordWriter(str(tmp_path / "validation-00000-of-00001")) as writer:
        rng = np.random.default_rng(0)
        good, bad = datakit.click_example(1, rng), datakit.click_example(2, rng)
        del bad.features.feature["price"]
        writer.write(good.SerializeToString())
        writer.write(bad.SerializeToString())
    wrong = {**datakit.CLICK_SCHEMA, "tags": {"dtype": "string", "shape": [2]}}  # the first record has no tags
    with pytest.raises(UserError) as raised:
        load_source("tfrecord", str(tmp_path), schema={"schema": wrong})
    assert "training.tfrecord_features.tags = " in raised.value.lines()[0] and "is a bytes_list of 0 value(s) in " \
        "the first record" in raised.value.lines()[0]
    source = load_source("tfrecord", str(tmp_path), schema={"schema": datakit.CLICK_SCHEMA}, num_classes=2)
    with pytest.raises(UserError) as raised, bad_records_named():
        list(source.split("validation"))
    assert raised.value.lines() == [
        f"error: data file = '{tmp_path}/validation-00000-of-00001 record 1, feature price: 0 value(s), not 1': does "
        "not match training.tfrecord_features; fix or remove that record, or describe the feature as it is (e.g. "
        '"shape": "variable")']


class _Pooled(tf_keras.layers.Layer):
    def call(self, inputs):
        return tf.reduce_sum(tf.cast(inputs["lists"], tf.float32), axis=[1, 2])[:, None] + inputs["price"]


def test_reference_inputs_round_trip_and_serving_default_takes_them_by_name(tmp_path):
    """Ragged at one level (a schema's variable feature) and at two ([batch, 3, None]), dense and text features:
    saved as npz they load back equal, and named as a REST client names them they are what serving_default takes."""
    lists = tf.ragged.constant([[[1], [2, 3], []], [[4, 5, 6], [7], [8]]], dtype=tf.int64, row_splits_dtype=tf.int64)
    inputs = {"lists": lists, "tags": tf.ragged.constant([[b"a", b"b"], []], row_splits_dtype=tf.int64),
              "price": tf.constant([[1.5], [2.5]])}
    np.savez(tmp_path / "reference.npz", **export.saved_inputs(inputs))
    with np.load(tmp_path / "reference.npz") as saved:
        assert set(saved) == {"inputs_lists", "inputs_lists_row_lengths", "inputs_lists_row_lengths_1",
                              "inputs_tags", "inputs_tags_row_lengths", "inputs_price"}
        loaded = export.loaded_inputs(saved)
        request = {key.removeprefix("inputs_"): tf.constant(value) for key, value in saved.items()}
    for name, tensor in inputs.items():
        assert type(loaded[name]) is type(tensor) and loaded[name].to_list() == tensor.to_list() \
            if isinstance(tensor, tf.RaggedTensor) else np.array_equal(loaded[name], tensor), name
    spec = {"lists": tf.RaggedTensorSpec([3, None], tf.int64, ragged_rank=1, row_splits_dtype=tf.int64),
            "price": tf.TensorSpec([1], tf.float32)}
    keras_in = input_contract.keras_inputs(spec)
    model = tf_keras.Model(keras_in, _Pooled()(keras_in))
    source = type("Source", (), {"raw_spec": spec})()
    serve = raw_export.signatures(model, source)["serving_default"]
    served = serve(**{name: value for name, value in request.items() if not name.startswith("tags")})
    np.testing.assert_allclose(served["prediction"], [[7.5], [32.5]])
    with np.load(tmp_path / "reference.npz") as saved:  # an npz of an earlier version: one level of lengths
        older = {key: value for key, value in saved.items() if key.startswith("inputs_tags")}
    assert export.loaded_inputs(older)["tags"].to_list() == [[b"a", b"b"], []]


def test_criteo_raw_features_through_the_one_preprocessing_are_the_models_features(tmp_path):
    criteokit.write(tmp_path / "train-0", criteokit.rows(40))
    criteokit.write(tmp_path / "validation-0", criteokit.rows(10, first=40))
    source = criteo.load(criteo_files(tmp_path, None))
    (raw, _), (features, _) = (next(iter(source.split("train", raw=raw).batch(40))) for raw in (True, False))
    assert raw["integers"].dtype == tf.int64 and raw["categories"].dtype == tf.string
    again = source.preprocessing(raw)
    np.testing.assert_array_equal(again["ids"], features["ids"])
    np.testing.assert_array_equal(again["dense"], features["dense"])
