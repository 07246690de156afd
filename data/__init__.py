"""Input pipelines: one module per source, each returning a data.source.DataSource; `preflight` needs no TensorFlow."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from cluster.training_names import (FILE_DATASETS, IMAGE_SIZE, ONE_HOT_LOSSES, SYNTHETIC_EXAMPLES, SYNTHETIC_SHAPE,
                                    TFRECORD_IMAGE_KEY, TFRECORD_LABEL_KEY, VALIDATION_FRACTION)
from cluster.recommender_options import DEFAULT_TABLE_ROWS, rows_per_table
from cluster.run_files import RunFiles
from cluster.topic_address import is_topic
from data import criteo_splits, image_layout, layouts

LAYOUTS = {"image_folder": image_layout.image_folders, "cifar10": layouts.cifar10, "mnist": layouts.mnist,
           "tfrecord": layouts.tfrecord_files, "criteo": criteo_splits.criteo_files}


def _layout(name: str, root: Path, *, criteo_validation=None, validation_fraction: float = VALIDATION_FRACTION):
    if name == "criteo":
        validation = tuple(criteo_validation) if isinstance(criteo_validation, (list, tuple)) else criteo_validation
        return criteo_splits.criteo_files(root, validation)
    if name == "image_folder":
        return image_layout.image_folders(root, validation_fraction)
    return LAYOUTS[name](root)


def bad_records_named():
    """Undecodable images, malformed Criteo lines and records off their TFRecord schema alike become one line
    naming the record (exit 2)."""
    from data import corrupt, criteo, failures, tfrecord_schema, unknown_lengths

    return failures.named(corrupt.UNDECODABLE, criteo.MALFORMED, tfrecord_schema.MISMATCHED, unknown_lengths.LENGTHS)


def preflight(options, base_dir: Path) -> None:
    """Checks the data set that TrainingOptions `options` names, on disk, in pure Python (no TensorFlow import).

    `base_dir` is the project directory (a relative data_dir starts there, like every path in cluster.json).
    Raises UserError with one line per problem: a missing data_dir, split, class folder or file; a class missing
    from a split; a CIFAR-10 file that is not a whole number of records; an idx file with a wrong magic number or
    size; an npz without MNIST's arrays; no train-* or validation-* TFRecord files. Images are not decoded here.
    """
    if options.follow_data:  # files land later: only the folder must be there
        followed_root(options, base_dir)
    elif options.dataset in FILE_DATASETS:
        _layout(options.dataset, layouts.data_root(options.dataset, options.data_dir, base_dir),
                criteo_validation=options.criteo_validation, validation_fraction=options.validation_fraction)


def _load_files(name: str, layout, *, image_size, tfrecord_image_key, tfrecord_label_key, tfrecord_num_classes,
                skip_corrupt: bool, schema=None):
    from data import cifar10, criteo, image_folder, mnist, tfrecord, tfrecord_schema

    if name == "criteo":
        return criteo.load(layout, skip_corrupt=skip_corrupt)
    if name == "image_folder":
        return image_folder.load(layout, image_size)
    if name == "cifar10":
        return cifar10.load(layout)
    if name == "mnist":
        return mnist.load(layout)
    if schema is not None:
        return tfrecord_schema.load(layout, **schema)
    return tfrecord.load(layout, image_size=image_size, image_key=tfrecord_image_key,
                         label_key=tfrecord_label_key, num_classes=tfrecord_num_classes)


def load_source(name: str, data_dir: str | None = None, seed: int = 0, *, base_dir: Path | None = None,
                one_hot: bool = False, augment: bool = False, skip_corrupt: bool = False, image_size=IMAGE_SIZE,
                tfrecord_image_key: str = TFRECORD_IMAGE_KEY, tfrecord_label_key: str = TFRECORD_LABEL_KEY,
                tfrecord_num_classes: int | None = None, synthetic_shape=SYNTHETIC_SHAPE,
                synthetic_examples: int = SYNTHETIC_EXAMPLES, table_rows=DEFAULT_TABLE_ROWS,
                criteo_validation=None, validation_fraction: float = VALIDATION_FRACTION, schema: dict | None = None,
                num_classes: int | None = None, synthetic_drift=None, declared_inputs=None):
    """The DataSource for a dataset name (imports TensorFlow); a relative data_dir starts at `base_dir` (or here).

    The other keywords are the TrainingOptions of the same names (see source_for); `one_hot` makes labels one-hot;
    `schema` holds tfrecord_features as `schema` and numeric_features and categorical_features as `numeric` and
    `categorical` (tfrecord of any schema). A "package.module:function" name is a user's dataset function.
    `synthetic_drift`: (new ids, id lifetime, period examples) of synthetic_criteo's ids born and dying;
    `declared_inputs` (a user model's, models/input_contract.py's declared_by) decides how a dataset
    function's features of unknown length are batched.
    """
    if ":" in name:
        from data import user_pipeline
        return user_pipeline.load(name, num_classes=num_classes, one_hot=one_hot,
                                  declared_inputs=declared_inputs)
    if name == "synthetic_criteo":
        from data import synthetic_criteo
        drift = synthetic_criteo.Drift(*synthetic_drift) if synthetic_drift else synthetic_criteo.Drift()
        return synthetic_criteo.load(rows_per_table(table_rows), seed=seed, train_examples=synthetic_examples,
                                     drift=drift)
    if name == "digits":
        from data import digits
        source = digits.load()
    elif name == "synthetic":
        from data import synthetic
        source = synthetic.load(tuple(synthetic_shape), seed=seed, train_examples=synthetic_examples)
    else:
        layout = _layout(name, layouts.data_root(name, data_dir, base_dir or Path.cwd()),
                         criteo_validation=criteo_validation, validation_fraction=validation_fraction)
        source = _load_files(name, layout, image_size=image_size, tfrecord_image_key=tfrecord_image_key,
                             tfrecord_label_key=tfrecord_label_key, tfrecord_num_classes=tfrecord_num_classes,
                             skip_corrupt=skip_corrupt, schema=schema and {**schema, "num_classes": num_classes})
    return dataclasses.replace(source, one_hot=one_hot, augment=augment, skip_corrupt=skip_corrupt)


def source_for(options, base_dir: Path, declared_inputs=None):
    """The DataSource TrainingOptions `options` describe; a relative data_dir starts at `base_dir`, as in preflight;
    `declared_inputs`: see load_source (the coordinator's callers pass models.sources.declared_by(options.model))."""
    return load_source(options.dataset, options.data_dir, options.seed, base_dir=base_dir,
                       one_hot=options.loss in ONE_HOT_LOSSES, augment=options.augment,
                       skip_corrupt=options.skip_corrupt, image_size=options.image_size,
                       tfrecord_image_key=options.tfrecord_image_key, tfrecord_label_key=options.tfrecord_label_key,
                       tfrecord_num_classes=options.tfrecord_num_classes, synthetic_shape=options.synthetic_shape,
                       synthetic_examples=options.synthetic_examples, table_rows=options.table_rows,
                       criteo_validation=options.criteo_validation, validation_fraction=options.validation_fraction,
                       schema=options.tfrecord_features and {"schema": options.tfrecord_features,
                                                             "numeric": options.numeric_features,
                                                             "categorical": options.categorical_features},
                       num_classes=options.num_classes,
                       synthetic_drift=(options.synthetic_new_ids, options.synthetic_id_lifetime,
                                        options.synthetic_period_examples), declared_inputs=declared_inputs)


def followed_for(options, base_dir: Path):
    """The FollowedData (data/followed.py) of a follow-mode run's TrainingOptions `options` (imports TensorFlow)."""
    from data.followed import FollowedData

    return FollowedData(options, followed_root(options, base_dir))


def followed_root(options, base_dir: Path) -> Path:
    """The folder a follow-mode run trains the files of: data_dir, or for a Kafka topic the run's own copy of its
    records (output_dir/stream, written by the chief as it reads them: online/follow/topic/), made here."""
    if not is_topic(options.data_dir):
        return layouts.data_root(options.dataset, options.data_dir, base_dir)
    root = RunFiles(Path(os.path.abspath(Path(base_dir) / Path(options.output_dir).expanduser()))).stream
    root.mkdir(parents=True, exist_ok=True)
    return root
