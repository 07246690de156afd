"""The coordinator's training options: one frozen dataclass, checked field by field with fixable errors."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

from cluster.strategies import STRATEGY_NAMES, StrategyName
from common.errors import Problem, UserError
from common.fields import (Check, is_int, is_number, optional_positive_int, parse_or_raise, positive_int,
                          positive_number)

FILE_DATASETS = ("image_folder", "cifar10", "mnist", "tfrecord")
IMAGE_SIZE = (224, 224)
SYNTHETIC_SHAPE, SYNTHETIC_EXAMPLES = (28, 28, 1), 4096  # the tutorial's MNIST-sized images
TFRECORD_IMAGE_KEY, TFRECORD_LABEL_KEY = "image/encoded", "image/class/label"  # as ImageNet's build scripts write
MODEL_NAMES = ("cnn", "mlp", "resnet", "mobilenet_v2")
DATASET_NAMES = ("digits", "synthetic", *FILE_DATASETS)
OPTIMIZER_NAMES = ("adam", "sgd", "rmsprop")
COLLECTIVE_NAMES = ("auto", "ring", "nccl")
LOOP_NAMES = ("fit", "custom")
USER_MODEL_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _option(default, help_text: str):
    return dataclasses.field(default=default, metadata={"help": help_text})


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingOptions:
    """What to train and how; every field can come from cluster.json's `training` or the command line."""

    model: str = _option("cnn", "cnn, mlp, resnet, mobilenet_v2, or package.module:function returning a "
                                "tf_keras model")
    dataset: str = _option("digits", "digits (embedded, real), synthetic, or from data_dir: image_folder, cifar10, "
                                     "mnist, tfrecord")
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
    per_worker_batch: int = _option(32, "examples per worker per step; the global batch is this times workers")
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
    keep_checkpoints: int = _option(3, "newest checkpoints kept (older ones go once the evaluator has read them)")
    probe_timeout_s: float = _option(60.0, "seconds to wait for every ps and worker port before giving up")
    seed: int = _option(0, "random seed for model initialisation and shuffling")
    progress_every_s: float = _option(30.0, "seconds between progress lines (and TensorBoard points) within an "
                                            "epoch; a line also ends each epoch")


FIELD_NAMES = tuple(f.name for f in dataclasses.fields(TrainingOptions))


def _model_name(value: Any) -> bool:
    return isinstance(value, str) and (value in MODEL_NAMES or bool(USER_MODEL_PATTERN.match(value)))


def _non_empty_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


CHECKS = {
    "model": Check(_model_name, "unknown model",
                   f"use one of {', '.join(MODEL_NAMES)} or 'package.module:function'"),
    "dataset": Check(lambda v: v in DATASET_NAMES, "unknown dataset", f"use one of {', '.join(DATASET_NAMES)}"),
    "data_dir": Check(lambda v: v is None or _non_empty_text(v), "must be a path", "give a directory or null"),
    "image_size": Check(lambda v: isinstance(v, (list, tuple)) and len(v) == 2 and all(positive_int(n) for n in v),
                        "must be [height, width] in pixels", "use e.g. [224, 224]"),
    "augment": Check(lambda v: isinstance(v, bool), "must be true or false", "use false unless training images "
                     "should be augmented"),
    "skip_corrupt": Check(lambda v: isinstance(v, bool), "must be true or false",
                          "use false to stop at the first corrupt image"),
    "tfrecord_image_key": Check(_non_empty_text, "must be a feature name", f"use e.g. {TFRECORD_IMAGE_KEY}"),
    "tfrecord_label_key": Check(_non_empty_text, "must be a feature name", f"use e.g. {TFRECORD_LABEL_KEY}"),
    "tfrecord_num_classes": Check(optional_positive_int, "must be a positive integer or null",
                                  "use null to count the classes from the labels"),
    "synthetic_shape": Check(lambda v: isinstance(v, (list, tuple)) and 1 <= len(v) <= 3
                             and all(positive_int(n) for n in v), "must be a list of 1 to 3 positive sizes",
                             "use e.g. [28, 28, 1]"),
    "synthetic_examples": Check(positive_int, "must be a positive integer", "use e.g. 4096"),
    "strategy": Check(lambda v: v in STRATEGY_NAMES, "unknown strategy", f"use one of {', '.join(STRATEGY_NAMES)}"),
    "collective": Check(lambda v: v in COLLECTIVE_NAMES, "unknown collective implementation",
                        f"use one of {', '.join(COLLECTIVE_NAMES)}"),
    "loop": Check(lambda v: v in LOOP_NAMES, "unknown training loop", f"use one of {', '.join(LOOP_NAMES)}"),
    "backup_every_steps": Check(positive_int, "must be a positive integer", "use e.g. 100"),
    "epochs": Check(positive_int, "must be a positive integer", "use e.g. 4"),
    "per_worker_batch": Check(positive_int, "must be a positive integer", "use e.g. 32"),
    "steps_per_epoch": Check(optional_positive_int, "must be a positive integer or null",
                             "use null to derive it from the data set size"),
    "steps_per_execution": Check(positive_int, "must be a positive integer", "use e.g. 10"),
    "optimizer": Check(lambda v: v in OPTIMIZER_NAMES, "unknown optimizer",
                       f"use one of {', '.join(OPTIMIZER_NAMES)}"),
    "learning_rate": Check(positive_number, "must be a positive number", "use e.g. 0.001"),
    "lr_decay_epochs": Check(lambda v: isinstance(v, (list, tuple)) and all(positive_int(e) for e in v),
                             "must be a list of positive epoch numbers", "use e.g. [4, 6] or []"),
    "lr_decay_factor": Check(lambda v: is_number(v) and 0 < v <= 1, "must be in (0, 1]", "use e.g. 0.1"),
    "loss": Check(_non_empty_text, "must be a Keras loss name", "use e.g. sparse_categorical_crossentropy"),
    "metrics": Check(lambda v: isinstance(v, (list, tuple)) and all(_non_empty_text(m) for m in v),
                     "must be a list of Keras metric names", 'use e.g. ["accuracy"]'),
    "output_dir": Check(_non_empty_text, "must be a path", "give a directory, e.g. output"),
    "min_shard_bytes": Check(positive_int, "must be a positive integer", "use e.g. 262144 (256 KiB)"),
    "max_shards": Check(optional_positive_int, "must be a positive integer or null", "use null for one shard per ps"),
    "keep_checkpoints": Check(lambda v: is_int(v) and v >= 2, "must be an integer >= 2",
                              "keep at least 2 so the evaluator can read one while the next is written"),
    "probe_timeout_s": Check(positive_number, "must be a positive number of seconds", "use e.g. 60"),
    "seed": Check(is_int, "must be an integer", "use e.g. 0"),
    "progress_every_s": Check(positive_number, "must be a positive number of seconds", "use e.g. 30"),
}


def parse_training_options(raw: Mapping[str, Any], field_prefix: str = "training.") -> TrainingOptions:
    """Builds TrainingOptions from a mapping, raising one UserError that lists every bad field."""
    options = parse_or_raise(TrainingOptions, raw, CHECKS, field_prefix)
    if options.loop == "custom" and options.strategy == StrategyName.PARAMETER_SERVER:
        raise UserError(Problem(f"{field_prefix}loop", options.loop, "the custom loop needs a synchronous strategy",
                                'use "loop": "fit" with parameter_server, or another strategy'))
    return options


def with_overrides(options: TrainingOptions, overrides: Mapping[str, Any]) -> TrainingOptions:
    """Applies command-line overrides on top of the file's options, validating them the same way."""
    listed = ("lr_decay_epochs", "metrics")  # Fire turns `--metrics accuracy` into a plain string
    overrides = {k: [v] if k in listed and not isinstance(v, (list, tuple)) else v for k, v in overrides.items()}
    merged = {**dataclasses.asdict(options), **overrides}
    return parse_training_options(merged, field_prefix="--")
