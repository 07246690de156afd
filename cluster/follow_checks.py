"""Checks of the follow-mode options (training on files as they land): one per field, then what follow mode refuses."""

from __future__ import annotations

from typing import Any

from cluster.strategies import StrategyName
from cluster.topic_address import address_problems, is_topic
from cluster.training_names import USER_MODEL_PATTERN
from cluster.training_options import TrainingOptions
from common.errors import Problem
from common.fields import INT32_MAX, MAX_SECONDS, Check, int_in, is_number, seconds, seconds_check

FOLLOWED_DATASETS = ("criteo", "tfrecord")  # file sources whose files can be trained one by one as they land
SMALLEST_PIECE_MB = 0.01
BACKLOG_ORDERS = ("oldest", "newest")
SERVING_CHECKPOINTS = ("beside", "settled")


def _pattern(value: Any) -> bool:
    """A glob relative to data_dir: not absolute, never climbing out of it."""
    return isinstance(value, str) and bool(value) and not value.startswith("/") and ".." not in value.split("/")


def _seconds_or_zero(value: Any) -> bool:
    return (is_number(value) and value == 0) or seconds(value)


CHECKS = {
    "follow_data": Check(lambda v: isinstance(v, bool), "must be true or false",
                         "use true to train on files as they land, false for epochs over a fixed data set"),
    "follow_pattern": Check(_pattern, "must be a glob relative to data_dir", 'use e.g. "*", "part-*.gz" or '
                            '"*/part-*"'),
    "topic_parser": Check(lambda v: v is None or (isinstance(v, str) and bool(USER_MODEL_PATTERN.match(v))),
                          "must be null or package.module:function", 'use e.g. "myclicks.parse:click"'),
    "data_poll_s": seconds_check("10"),
    "stop_when_idle_s": Check(lambda v: (is_number(v) and v == 0) or seconds(v),
                              f"must be 0 or a positive number of seconds, at most {MAX_SECONDS}",
                              "use e.g. 3600, or 0 to follow until stopped"),
    "piece_mb": Check(lambda v: is_number(v) and SMALLEST_PIECE_MB <= v <= 1 << 20,
                      f"must be a number of MB from {SMALLEST_PIECE_MB} to {1 << 20}", "use e.g. 16"),
    "settle_s": Check(_seconds_or_zero, f"must be 0 or a positive number of seconds, at most {MAX_SECONDS}",
                      "use e.g. 30 (longer than the pauses of the producer writing into data_dir)"),
    "unfinished_after_s": Check(_seconds_or_zero, f"must be 0 or a positive number of seconds, at most "
                                f"{MAX_SECONDS}", "use e.g. 600"),
    "backlog_order": Check(lambda v: v in BACKLOG_ORDERS, f"must be one of {', '.join(BACKLOG_ORDERS)}",
                           "use oldest (landing order) or newest (freshest first)"),
    "max_bad_fraction": Check(lambda v: is_number(v) and 0 <= v <= 1, "must be a fraction from 0 to 1",
                              "use e.g. 0.5, or 1 to never stop for bad data"),
    "serving_export_every_s": seconds_check("600"),
    "serving_delta_every_s": Check(lambda v: (is_number(v) and v == 0) or seconds(v),
                                   f"must be 0 or a positive number of seconds, at most {MAX_SECONDS}",
                                   "use e.g. 10, or 0 to write no deltas"),
    "serving_delta_switch_mb": Check(lambda v: is_number(v) and 0 <= v <= 1 << 30,
                                     f"must be a number of MB from 0 to {1 << 30}", "use e.g. 16, or 0"),
    "serving_checkpoint": Check(lambda v: v in SERVING_CHECKPOINTS, f"must be one of {', '.join(SERVING_CHECKPOINTS)}",
                                "use beside (hand-out never pauses for a version) or settled (the workers drain "
                                "for its checkpoint)"),
    "straggler_after_s": seconds_check("20"),
    "keep_serving_versions": Check(int_in(1, INT32_MAX), f"must be an integer from 1 to {INT32_MAX}",
                                   "use e.g. 5"),
}


def follow_problems(options: TrainingOptions, prefix: str) -> list[Problem]:
    """What follow mode cannot do: data that is not files, a synchronous strategy, held-out splits, epochs; a Kafka
    topic that is not followed, or not named as one."""
    if is_topic(options.data_dir) and not options.follow_data:
        return [Problem(f"{prefix}data_dir", options.data_dir, "is a Kafka topic, which is only ever followed: it has "
                        "no end to make epochs of", "set training.follow_data true")]
    if options.topic_parser is not None and not is_topic(options.data_dir):
        return [Problem(f"{prefix}topic_parser", options.topic_parser, "parses a Kafka topic's messages, but "
                        "data_dir is not a topic", "use null, or name a topic: kafka://HOST:PORT/TOPIC")]
    if not options.follow_data:
        return []
    topic = address_problems(options.data_dir, f"{prefix}data_dir")
    if topic:
        return topic
    field = f"{prefix}follow_data"
    if options.dataset not in FOLLOWED_DATASETS:
        return [Problem(field, True, f"trains on files as they land in data_dir, but {options.dataset} is a fixed "
                        "data set", f"use dataset {' or '.join(FOLLOWED_DATASETS)} with data_dir, or follow_data "
                        "false")]
    problems = []
    if options.strategy != StrategyName.PARAMETER_SERVER:
        problems.append(Problem(field, True, f"hands pieces of data to workers as they are free, which "
                                f"{options.strategy} cannot do (every worker takes every step)",
                                "use strategy parameter_server, or follow_data false"))
    if options.criteo_validation is not None:
        problems.append(Problem(f"{prefix}criteo_validation", options.criteo_validation, "holds data back, but "
                                "follow mode trains every file (the evaluator scores each checkpoint on data it "
                                "has not trained on yet)", "use null"))
    if options.steps_per_epoch is not None:
        problems.append(Problem(f"{prefix}steps_per_epoch", options.steps_per_epoch, "follow mode has no epochs: "
                                "it trains each file once as it lands", "use null"))
    if options.serving_checkpoint == "settled" and options.serving_delta_every_s:
        problems.append(Problem(f"{prefix}serving_checkpoint", "settled", "cannot be a delta's base: with "
                                "serving_delta_every_s a version's checkpoint is its own, kept while its version is "
                                "the newest", "use beside, or serving_delta_every_s 0"))
    if options.dataset == "tfrecord" and not options.tfrecord_features and options.tfrecord_num_classes is None:
        problems.append(Problem(f"{prefix}tfrecord_num_classes", None, "cannot be counted from data that has not "
                                "landed yet", "give the number of classes"))
    return problems
