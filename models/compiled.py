"""The model a run trains, compiled with its optimizer slots built: the same way for training, export and evaluation."""

from __future__ import annotations

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
