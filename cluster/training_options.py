"""The coordinator's training options: one frozen dataclass, checked field by field with fixable errors."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

from cluster import recommender_options as clicks
from cluster.strategies import STRATEGY_NAMES, StrategyName
from common.errors import Problem, UserError
from common.fields import (INT32_MAX, MAX_SECONDS, Check, int_in, is_number, optional_positive_int, parse_or_raise,
                           positive_int, positive_number, seconds, seconds_check)

FILE_DATASETS = ("image_folder", "cifar10", "mnist", "tfrecord", "criteo")
IMAGE_SIZE = (224, 224)
SYNTHETIC_SHAPE, SYNTHETIC_EXAMPLES = (28, 28, 1), 4096  # the tutorial's MNIST-sized images
TFRECORD_IMAGE_KEY, TFRECORD_LABEL_KEY = "image/encoded", "image/class/label"  # as ImageNet's build scripts write
ONE_HOT_LOSSES = ("categorical_crossentropy", "categorical_focal_crossentropy", "categorical_hinge")
MODEL_NAMES = ("cnn", "mlp", "resnet", "mobilenet_v2", *clicks.RECOMMENDER_MODELS)
CONVOLUTIONAL_MODELS = ("cnn", "resnet", "mobilenet_v2")
RESIZED_DATASETS = ("image_folder", "tfrecord")  # images resized to image_size
DATASET_NAMES = ("digits", "synthetic", *FILE_DATASETS, "synthetic_criteo")
OPTIMIZER_NAMES = ("adam", "sgd", "rmsprop")
COLLECTIVE_NAMES = ("auto", "ring", "nccl")
LOOP_NAMES = ("fit", "custom")
USER_MODEL_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
# Names tf_keras.losses.get / tf_keras.metrics.get resolve (tests/test_option_names.py proves it, so the lists
# cannot drift) that work with the labels the data sets give: class indices, or one-hot for ONE_HOT_LOSSES.
LOSS_NAMES = ("sparse_categorical_crossentropy", *ONE_HOT_LOSSES)
SPARSE_LABEL_METRICS = ("accuracy", "acc", "sparse_categorical_accuracy", "sparse_top_k_categorical_accuracy",
                        "sparse_categorical_crossentropy")
ONE_HOT_LABEL_METRICS = ("accuracy", "acc", "categorical_accuracy", "top_k_categorical_accuracy",
                         "categorical_crossentropy")
METRIC_NAMES = tuple(dict.fromkeys(SPARSE_LABEL_METRICS + ONE_HOT_LABEL_METRICS))
MINIMISED_METRICS = ("loss", "sparse_categorical_crossentropy", "categorical_crossentropy",  # smaller is better
                     "log_loss")
MAX_SIDE = 8192  # pixels per image side, or elements per synthetic axis
SEED_LIMIT = 2**32  # numpy (tf_keras.utils.set_random_seed) takes seeds in [0, 2**32)


def _option(default, help_text: str):
    return dataclasses.field(default=default, metadata={"help": help_text})


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingOptions:
    """What to train and how; every field can come from cluster.json's `training` or the command line."""

    model: str = _option("cnn", "cnn, mlp, resnet, mobilenet_v2, dlrm, wide_deep (click data), or "
                                "package.module:function returning a tf_keras model")
    dataset: str = _option("digits", "digits (embedded, real), synthetic, synthetic_criteo, or from data_dir: "
                                     "image_folder, cifar10, mnist, tfrecord, criteo")
    data_dir: str | None = _option(None, "directory of a file-based data set (relative: from the project directory); "
                                         "workers read it at the same path on their own hosts")
    image_size: tuple[int, ...] = _option(IMAGE_SIZE, "[height, width] image_folder and tfrecord images are resized to")
    augment: bool = _option(False, "augment training images: rotation 40 degrees, shifts 0.2, shear 0.2, zoom 0.2, "
                                   "horizontal flips")
    skip_corrupt: bool = _option(False, "skip images that cannot be decoded, counted in the reading task's log, "
                                        "instead of stopping with the file's name")
    tfrecord_image_key: str = _option(TFRECORD_IMAGE_KEY, "tf.train.Example feature holding the encoded image")
    tfrecord_label_key: str = _option(TFRECORD_LABEL_KEY, "tf.train.Example feature holding the integer label")
    tfrecord_num_classes: int | None = _option(None, "classes of a tfrecord data set; null reads every label once "
                                                     "to find the largest")
    strategy: str = _option("parameter_server", "parameter_server (chief, workers and ps), multi_worker_mirrored "
                                              "(every worker trains, worker 0 leads; no ps), mirrored (the chief "
                                              "alone, all its GPUs) or one_device (the chief alone, one device)")
    collective: str = _option("auto", "multi_worker_mirrored's all-reduce: auto, ring or nccl")
    loop: str = _option("fit", "fit (Keras model.fit) or custom (a custom training loop that backs up every "
                               "backup_every_steps steps and resumes mid-epoch; not with parameter_server)")
    backup_every_steps: int = _option(100, "custom loop: steps between backups of model, optimizer, epoch and step")
    synthetic_shape: tuple[int, ...] = _option(SYNTHETIC_SHAPE, "synthetic: the shape of each image, e.g. [28, 28, 1]")
    synthetic_examples: int = _option(SYNTHETIC_EXAMPLES, "synthetic: training examples (validation and test hold "
                                                          "512 each)")
    epochs: int = _option(6, "epochs to train in all (a resumed run finishes the same plan)")
    per_worker_batch: int = _option(32, "the batch is this times the workers; under parameter_server each step runs "
                                        "that whole batch on one worker (workers take steps in turn), under "
                                        "multi_worker_mirrored every worker runs this many per step")
    steps_per_epoch: int | None = _option(None, "steps per epoch; null derives it as train examples // global batch")
    steps_per_execution: int = _option(10, "steps each worker runs per remote call")
    optimizer: str = _option("adam", "adam, sgd or rmsprop")
    learning_rate: float = _option(1e-3, "initial learning rate")
    lr_decay_epochs: tuple[int, ...] = _option((4, 6), "epochs (1-based) from which the rate is multiplied by "
                                                       "lr_decay_factor")
    lr_decay_factor: float = _option(0.1, "factor applied at each of lr_decay_epochs")
    loss: str = _option("sparse_categorical_crossentropy", "Keras loss name")
    metrics: tuple[str, ...] = _option(("accuracy",), "Keras metric names")
    output_dir: str = _option("output", "checkpoints, TensorBoard logs, exported model and summary (chief's disk)")
    min_shard_bytes: int = _option(256 * 1024, "MinSizePartitioner: smallest shard of a variable, in bytes")
    max_shards: int | None = _option(None, "MinSizePartitioner: most shards per variable; null means one per ps")
    checkpoint_every_s: float = _option(600.0, "parameter_server: seconds between checkpoints within an epoch (at "
                                               "most this much work is lost to a failure); 0 saves at epoch ends only")
    keep_checkpoints: int = _option(3, "newest checkpoints kept (older ones go once the evaluator has read them)")
    probe_timeout_s: float = _option(60.0, "seconds to wait for every ps and worker port before giving up")
    seed: int = _option(0, "random seed for model initialisation and shuffling")
    progress_every_s: float = _option(30.0, "seconds between progress lines (and TensorBoard points) within an "
                                            "epoch; a line also ends each epoch")
    embedding_dim: int = _option(16, "dlrm, wide_deep: width of each categorical feature's embedding")
    table_rows: int | tuple[int, ...] = _option(clicks.DEFAULT_TABLE_ROWS, "dlrm, wide_deep: rows (hash buckets) "
                                                "of every table, or a list of 26, one per categorical feature")
    bottom_mlp: tuple[int, ...] = _option((64,), "dlrm: layer widths on the numeric features")
    top_mlp: tuple[int, ...] = _option((64, 32), "dlrm: layer widths after the interaction; wide_deep: the deep part")
    embedding_optimizer: str = _option("adagrad", "dlrm, wide_deep: the tables' optimizer, one that updates only "
                                                  "looked-up rows: adagrad, sgd or ftrl")
    embedding_learning_rate: float = _option(0.05, "dlrm, wide_deep: the tables' learning rate")


FIELD_NAMES = tuple(f.name for f in dataclasses.fields(TrainingOptions))


def _model_name(value: Any) -> bool:
    return isinstance(value, str) and (value in MODEL_NAMES or bool(USER_MODEL_PATTERN.match(value)))


def _side(value: Any) -> bool:
    return positive_int(value) and value <= MAX_SIDE


def _count(example: str) -> Check:
    return Check(positive_int, f"must be an integer from 1 to {INT32_MAX}", f"use e.g. {example}")


def _non_empty_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


CHECKS = {
    "model": Check(_model_name, "unknown model",
                   f"use one of {', '.join(MODEL_NAMES)} or 'package.module:function'"),
    "dataset": Check(lambda v: v in DATASET_NAMES, "unknown dataset", f"use one of {', '.join(DATASET_NAMES)}"),
    "data_dir": Check(lambda v: v is None or _non_empty_text(v), "must be a path", "give a directory or null"),
    "image_size": Check(lambda v: isinstance(v, (list, tuple)) and len(v) == 2 and all(_side(n) for n in v),
                        f"must be [height, width] in pixels, each 1 to {MAX_SIDE}", "use e.g. [224, 224]"),
    "augment": Check(lambda v: isinstance(v, bool), "must be true or false", "use false unless training images "
                     "should be augmented"),
    "skip_corrupt": Check(lambda v: isinstance(v, bool), "must be true or false",
                          "use false to stop at the first corrupt image"),
    "tfrecord_image_key": Check(_non_empty_text, "must be a feature name", f"use e.g. {TFRECORD_IMAGE_KEY}"),
    "tfrecord_label_key": Check(_non_empty_text, "must be a feature name", f"use e.g. {TFRECORD_LABEL_KEY}"),
    "tfrecord_num_classes": Check(optional_positive_int, f"must be an integer from 1 to {INT32_MAX}, or null",
                                  "use null to count the classes from the labels"),
    "synthetic_shape": Check(lambda v: isinstance(v, (list, tuple)) and 1 <= len(v) <= 3
                             and all(_side(n) for n in v), f"must be a list of 1 to 3 sizes, each 1 to {MAX_SIDE}",
                             "use e.g. [28, 28, 1]"),
    "synthetic_examples": _count("4096"),
    "strategy": Check(lambda v: v in STRATEGY_NAMES, "unknown strategy", f"use one of {', '.join(STRATEGY_NAMES)}"),
    "collective": Check(lambda v: v in COLLECTIVE_NAMES, "unknown collective implementation",
                        f"use one of {', '.join(COLLECTIVE_NAMES)}"),
    "loop": Check(lambda v: v in LOOP_NAMES, "unknown training loop", f"use one of {', '.join(LOOP_NAMES)}"),
    "backup_every_steps": _count("100"),
    "epochs": _count("4"),
    "per_worker_batch": _count("32"),
    "steps_per_epoch": Check(optional_positive_int, f"must be an integer from 1 to {INT32_MAX}, or null",
                             "use null to derive it from the data set size"),
    "steps_per_execution": _count("10"),
    "optimizer": Check(lambda v: v in OPTIMIZER_NAMES, "unknown optimizer",
                       f"use one of {', '.join(OPTIMIZER_NAMES)}"),
    "learning_rate": Check(positive_number, "must be a positive number", "use e.g. 0.001"),
    "lr_decay_epochs": Check(lambda v: isinstance(v, (list, tuple)) and all(positive_int(e) for e in v),
                             f"must be a list of epoch numbers from 1 to {INT32_MAX}", "use e.g. [4, 6] or []"),
    "lr_decay_factor": Check(lambda v: is_number(v) and 0 < v <= 1, "must be in (0, 1]", "use e.g. 0.1"),
    "loss": Check(lambda v: v in (*LOSS_NAMES, clicks.CLICK_LOSS), "unknown loss for class labels or clicks",
                  f"use one of {', '.join(LOSS_NAMES)} ({clicks.CLICK_LOSS} for dlrm, wide_deep)"),
    "metrics": Check(lambda v: isinstance(v, (list, tuple)) and all(m in (*METRIC_NAMES, *clicks.CLICK_METRICS)
                                                                    for m in v)
                     and len(set(v)) == len(v), "must be a list of distinct Keras metric names",
                     f"use some of {', '.join(METRIC_NAMES)} ({', '.join(clicks.CLICK_METRICS)} for click data)"),
    "output_dir": Check(_non_empty_text, "must be a path", "give a directory, e.g. output"),
    "min_shard_bytes": Check(int_in(1, 2**63 - 1), "must be a positive integer (int64)", "use e.g. 262144 (256 KiB)"),
    "max_shards": Check(optional_positive_int, f"must be an integer from 1 to {INT32_MAX}, or null",
                        "use null for one shard per ps"),
    "checkpoint_every_s": Check(lambda v: (is_number(v) and v == 0) or seconds(v),
                                f"must be 0 or a positive number of seconds, at most {MAX_SECONDS}",
                                "use e.g. 600, or 0 for epoch ends only"),
    "keep_checkpoints": Check(int_in(2, INT32_MAX), f"must be an integer from 2 to {INT32_MAX}",
                              "keep at least 2 so the evaluator can read one while the next is written"),
    "probe_timeout_s": seconds_check("60"),
    "seed": Check(int_in(0, SEED_LIMIT - 1), f"must be an integer from 0 to {SEED_LIMIT - 1}",
                  "use e.g. 0 (numpy takes seeds in [0, 2**32))"),
    "progress_every_s": seconds_check("30"),
    **clicks.CHECKS,
}


def parse_training_options(raw: Mapping[str, Any], field_prefix: str = "training.") -> TrainingOptions:
    """Builds TrainingOptions from a mapping, raising one UserError that lists every bad field."""
    options = parse_or_raise(TrainingOptions, clicks.with_click_defaults(raw), CHECKS, field_prefix)
    problems = [*_loop_problems(options, field_prefix), *clicks.fit_problems(options, field_prefix),
                *_metric_problems(options, field_prefix), *_shape_problems(options, field_prefix)]
    if problems:
        raise UserError(problems)
    return options


def _loop_problems(options: TrainingOptions, prefix: str) -> list[Problem]:
    if options.loop == "custom" and options.strategy == StrategyName.PARAMETER_SERVER:
        return [Problem(f"{prefix}loop", options.loop, "the custom loop needs a synchronous strategy",
                        'use "loop": "fit" with parameter_server, or another strategy')]
    return []


def _metric_problems(options: TrainingOptions, prefix: str) -> list[Problem]:
    """Each metric must fit the labels the loss asks for: class indices, or one-hot for ONE_HOT_LOSSES."""
    one_hot = options.loss in ONE_HOT_LOSSES
    fitting = clicks.metrics_for(options.loss) or (ONE_HOT_LABEL_METRICS if one_hot else SPARSE_LABEL_METRICS)
    labels = "click labels" if clicks.metrics_for(options.loss) else "one-hot labels" if one_hot else \
        "class-index labels"
    return [Problem(f"{prefix}metrics", list(options.metrics), f"{name} does not work with the {labels} that loss "
                    f"{options.loss} trains on", f"use some of {', '.join(fitting)}")
            for name in options.metrics if name not in fitting]


def _shape_problems(options: TrainingOptions, prefix: str) -> list[Problem]:
    """The built-in convolutional models reshape flat inputs to a square image, and cnn's 3x3 kernel needs 3x3."""
    if options.model not in CONVOLUTIONAL_MODELS or options.dataset not in ("synthetic", *RESIZED_DATASETS):
        return []
    field = "synthetic_shape" if options.dataset == "synthetic" else "image_size"
    shape = getattr(options, field)
    if len(shape) == 1 and round(shape[0] ** 0.5) ** 2 != shape[0]:
        return [Problem(f"{prefix}{field}", list(shape), f"{options.model} reshapes flat inputs to a square image, "
                        "and this size is not a square", "use e.g. [784] (28x28) or [28, 28, 1]")]
    sides = [round(shape[0] ** 0.5)] if len(shape) == 1 else shape[:2]
    if options.model == "cnn" and min(sides) < 3:
        return [Problem(f"{prefix}{field}", list(shape), "cnn's 3x3 convolution needs images of at least 3x3",
                        "use e.g. [28, 28, 1], or the mlp model")]
    return []


def with_overrides(options: TrainingOptions, overrides: Mapping[str, Any]) -> TrainingOptions:
    """Applies command-line overrides on top of the file's options, validating them the same way."""
    listed = ("lr_decay_epochs", "metrics")  # Fire turns `--metrics accuracy` into a plain string
    overrides = {k: [v] if k in listed and not isinstance(v, (list, tuple)) else v for k, v in overrides.items()}
    merged = {**dataclasses.asdict(options), **overrides}
    return parse_training_options(merged, field_prefix="--")
