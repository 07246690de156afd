"""The data of a follow-mode run: a folder whose files are trained as they land, each read in pieces by any worker.

Criteo click logs (plain or .gz, any names: train.txt, day_N, part-*; Kaggle's unlabelled test.txt is not
data) and TFRecord files (images, or records of any schema with `tfrecord_features`) are followed. The model
is built from, and exported for, the same DataSource a fixed run of these files would have (its features,
raw features and preprocessing), made with no files yet: every attribute FollowedData does not define is that
source's. `examples(path, begin, end)` builds one piece's examples in-graph, so one traced function reads any
piece on whichever worker runs it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import tensorflow as tf

from cluster.training_names import ONE_HOT_LOSSES
from common.errors import Problem, UserError
from data import criteo, tfrecord, tfrecord_schema
from data.criteo_layout import first_line_problem
from data.criteo_splits import CriteoFiles
from data.folder import data_files, natural_key
from data.pieces import WHOLE, Piece, cut_into_pieces, whole_file
from data.whole_files import gzip_missing, text_missing, tfrecord_missing

UNLABELLED = ("test.txt", "test.txt.gz")  # Kaggle's Criteo test file: no labels, so never training data
MB = 1 << 20


def _source_of_no_files(options):
    """The DataSource a fixed run of such files would have, with no files: its readers read any file given."""
    if options.dataset == "criteo":
        return criteo.load(CriteoFiles({"train": (), "validation": (), "test": ()}, ""),
                           skip_corrupt=options.skip_corrupt)
    if options.tfrecord_features:
        return tfrecord_schema.schema_source(schema=options.tfrecord_features, numeric=options.numeric_features,
                                             categorical=options.categorical_features,
                                             num_classes=options.num_classes)
    return tfrecord.image_source(image_size=options.image_size, image_key=options.tfrecord_image_key,
                                 label_key=options.tfrecord_label_key, num_classes=options.tfrecord_num_classes)


class FollowedData:
    """A followed folder: which files are data, when each is whole, its pieces, and a piece's examples."""

    def __init__(self, options, root: Path):
        self.root, self.kind, self.pattern = root, options.dataset, options.follow_pattern
        self.schema = options.tfrecord_features
        self.piece_bytes = max(1, round(options.piece_mb * MB))
        self.source = dataclasses.replace(_source_of_no_files(options), one_hot=options.loss in ONE_HOT_LOSSES,
                                          skip_corrupt=options.skip_corrupt)

    def __getattr__(self, name: str):
        if name == "source":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.source, name)  # feature_spec, raw_spec, preprocessing, num_classes, name, ...

    def excluded(self, name: str) -> bool:
        """A name the pattern takes that is never data (Kaggle's unlabelled Criteo test file)."""
        return self.kind == "criteo" and name.rsplit("/", 1)[-1] in UNLABELLED

    def missing(self, path: Path) -> str | None:
        """What the file lacks to be whole; a whole file that is not such data stops the run, naming it."""
        if self.kind == "tfrecord":
            why = tfrecord_missing(path)
            if not why and self.schema and path.stat().st_size:
                tfrecord_schema.check_first(str(path), self.schema)
            return why
        why = gzip_missing(path) if path.name.endswith(".gz") else text_missing(path)
        problem = None if why else first_line_problem(str(path))
        if problem:
            raise UserError(Problem(problem.field, problem.value, problem.problem,
                                    "take it out of training.data_dir or narrow training.follow_pattern"))
        return why

    def pieces(self, name: str, size: int) -> list[Piece]:
        """A plain Criteo file in byte ranges of about piece_mb; a gzip or TFRecord file whole."""
        if self.kind == "criteo" and not name.endswith(".gz"):
            return cut_into_pieces(self.root, name, size, self.piece_bytes)
        return whole_file(name)

    def path(self, name: str) -> str:
        return str(self.root / name)

    def examples(self, path, begin, end, *, raw: bool = False) -> tf.data.Dataset:
        """The examples of bytes [begin, end) of `path`, or of the whole file when end is -1 (tensors allowed);
        with `raw`, the features as they are in the data."""
        if self.kind == "tfrecord":
            units = tf.data.Dataset.from_tensors((path,))
        else:
            begin, end = tf.cast(begin, tf.int64), tf.cast(end, tf.int64)
            whole = end < 0
            zero = tf.constant(0, tf.int64)
            units = tf.data.Dataset.from_tensors((path, tf.where(whole, zero, begin), tf.where(whole, zero, end), zero,
                                                  tf.where(whole, tf.constant(-1, tf.int64), zero)))
        return self.source.unit_examples(units, raw=raw)

    def piece_examples(self, piece: Piece, *, raw: bool = False) -> tf.data.Dataset:
        return self.examples(tf.constant(self.path(piece.name)), piece.begin, piece.end, raw=raw)

    def split(self, name: str, *, raw: bool = False) -> tf.data.Dataset:
        """Follow mode has no splits: any split is every example of the data files there now, in name order (what
        reference inputs and samples of ids are taken from)."""
        names = sorted(data_files(self.root, self.pattern, self.excluded), key=natural_key)
        if not names:
            return self.examples(tf.constant(""), 0, 0, raw=raw).take(0)
        paths = tf.data.Dataset.from_tensor_slices([self.path(n) for n in names])
        return paths.flat_map(lambda path: self.examples(path, 0, WHOLE, raw=raw))
