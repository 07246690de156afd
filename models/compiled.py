"""The model a run trains, compiled with its optimizer slots built: the same way for training, export and evaluation."""

from __future__ import annotations

import tensorflow as tf
import tf_keras

from cluster.recommender_options import RECOMMENDER_MODELS
from cluster.training_options import TrainingOptions
from models import input_contract, recommenders, zoo
from tables.kinds import table_report
from tables.pooling import table_ids
from models.raw_export import RawFeatures
from tables.shard_report import report_lines, shard_report
from tables.sparse import SparseDenseModel
from data import contract


def build_compiled(options: TrainingOptions, source, **compile_kwargs) -> tf_keras.Model:
    """A zoo, user or recommender model (dlrm, wide_deep: two optimizers) for the features of `source` (a data
    source: feature_spec, num_classes, name); a model that cannot take them is refused. Call under the
    strategy's scope."""
    if options.model in RECOMMENDER_MODELS:
        return recommenders.build_and_compile(options.model, recommenders.from_training(options),
                                              zoo.make_optimizer(options), features=source.feature_spec,
                                              metric_names=options.metrics, **compile_kwargs)
    model = zoo.build(options.model, source.feature_spec, source.num_classes, source.name)
    input_contract.check(model, source.feature_spec, model_name=options.model, source_name=source.name)
    zoo.compile_model(model, options, **compile_kwargs)
    model.optimizer.build(model.trainable_variables)
    return model


def build_loss_and_metrics(model: tf_keras.Model, element_spec) -> bool:
    """Makes the compiled loss's and metrics' variables now, for batches of `element_spec` (features, labels, ...),
    as Keras' own training and test steps would make them in their first trace; whether it did. A function whose
    first trace made variables is traced a second time (TensorFlow's rule), so a step that makes none is traced
    once. Done only for Keras' own steps (a model's own step builds what it uses) and a model whose outputs are
    known (a functional one; the recommenders make their metrics at compile)."""
    own_steps = (type(model).train_step, type(model).test_step) != (tf_keras.Model.train_step,
                                                                    tf_keras.Model.test_step)
    if own_steps or model.compiled_metrics is None:
        return False
    if model.compiled_metrics._built or not isinstance(element_spec, tuple) or len(element_spec) < 2:
        return False
    try:
        outputs = model.output  # single, list or dict, as the model returns its predictions
    except AttributeError:  # a subclassed model: its outputs are known once it is called
        return False
    predictions = tf.nest.map_structure(lambda output: tf.TensorSpec(output.shape, output.dtype), outputs)
    model.compiled_loss.build(predictions)
    model.compiled_metrics.build(predictions, element_spec[1])
    return True


CUSTOM_OBJECTS = {**recommenders.CUSTOM_OBJECTS, "RawFeatures": RawFeatures}  # what loading an export needs


def ps_report(model: tf_keras.Model, source, global_batch: int, log) -> dict:
    """A recommender's per-ps report (bytes held, rows looked up and bytes moved per step, for one training batch),
    logged one line per ps; {} for other models."""
    if not isinstance(model, SparseDenseModel):
        return {}
    features, _ = next(iter(contract.batch(source.split("train"), global_batch).take(1)))
    report = with_table_stats(shard_report(model, table_ids(features["ids"]).numpy()), model)
    for line in report_lines(report):
        log.info("per ps: %s", line)
    return report


def with_table_stats(report: dict, model) -> dict:
    """The per-ps report with each ps's dynamic table rows merged in (as they stand now)."""
    tables = table_report(model)
    for name, stats in (tables.summary() if tables is not None else {}).items():
        report.setdefault(name, {"lookups_per_step": 0, "bytes_moved_per_step": 0}).update(stats)
    return report
