"""The data of a follow-mode run: a folder whose files are trained as they land, each read in pieces by any worker.

Criteo click logs (plain or .gz, any names: train.txt, day_N, part-*; Kaggle's unlabelled test.txt is not
data) and TFRecord files of images are followed. `examples(path, begin, end)` builds one piece's examples
in-graph, so one traced function reads any piece on whichever worker runs it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import tensorflow as tf

from cluster.training_names import ONE_HOT_LOSSES
from common.errors import Problem, UserError
from data import criteo, tfrecord
from data.criteo_layout import first_line_problem
from data.criteo_splits import CriteoFiles
from data.landing import Landed, Landing, data_files, natural_key
from data.pieces import WHOLE, Piece, cut_into_pieces, whole_file
from data.whole_files import gzip_missing, text_missing, tfrecord_missing

UNLABELLED = ("test.txt", "test.txt.gz")  # Kaggle's Criteo test file: no labels, so never training data
MB = 1 << 20


class FollowedData:
    """A followed folder: which files are data, when each is whole, its pieces, and a piece's examples."""

    def __init__(self, options, root: Path):
        self.root, self.kind, self.pattern = root, options.dataset, options.follow_pattern
        self.piece_bytes = max(1, round(options.piece_mb * MB))
        if self.kind == "criteo":
            empty = CriteoFiles({"train": (), "validation": (), "test": ()}, "")
            self.source = criteo.load(empty, skip_corrupt=options.skip_corrupt)
        else:
            self.source = tfrecord.image_source(image_size=options.image_size, image_key=options.tfrecord_image_key,
                                                label_key=options.tfrecord_label_key,
                                                num_classes=options.tfrecord_num_classes)
        self.source = dataclasses.replace(self.source, one_hot=options.loss in ONE_HOT_LOSSES,
                                          skip_corrupt=options.skip_corrupt)

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.source.input_shape

    @property
    def num_classes(self) -> int:
        return self.source.num_classes

    def landing(self, taken: dict[str, tuple[int, float]] | None = None) -> Landing:
        """A watcher of the folder that skips `taken` files (a resumed run's)."""
        return Landing(self.root, self.pattern, self.missing, taken=taken, excluded=self._excluded)

    def _excluded(self, name: str) -> bool:
        return self.kind == "criteo" and name.rsplit("/", 1)[-1] in UNLABELLED

    def split(self, name: str) -> tf.data.Dataset:
        """Follow mode has no splits: any split is every example of the data files there now, in name order (what
        reference inputs and samples of ids are taken from)."""
        names = sorted(data_files(self.root, self.pattern, self._excluded), key=natural_key)
        if not names:
            return self.examples(tf.constant(""), 0, 0).take(0)
        pieces = tf.data.Dataset.from_tensor_slices([self.path(n) for n in names])
        return pieces.flat_map(lambda path: self.examples(path, 0, WHOLE))

    def missing(self, path: Path) -> str | None:
        """What the file lacks to be whole; a whole Criteo file whose first line is not Criteo stops the run."""
        if self.kind == "tfrecord":
            return tfrecord_missing(path)
        why = gzip_missing(path) if path.name.endswith(".gz") else text_missing(path)
        problem = None if why else first_line_problem(str(path))
        if problem:
            raise UserError(Problem(problem.field, problem.value, problem.problem,
                                    "take it out of training.data_dir or narrow training.follow_pattern"))
        return why

    def pieces(self, landed: Landed) -> list[Piece]:
        """A plain Criteo file in byte ranges of about piece_mb; a gzip or TFRecord file whole."""
        if self.kind == "criteo" and not landed.name.endswith(".gz"):
            return cut_into_pieces(self.root, landed.name, landed.size, self.piece_bytes)
        return whole_file(landed.name)

    def path(self, name: str) -> str:
        return str(self.root / name)

    def examples(self, path, begin, end) -> tf.data.Dataset:
        """The examples of bytes [begin, end) of `path`, or of the whole file when end is -1 (tensors allowed)."""
        if self.kind == "tfrecord":
            units = tf.data.Dataset.from_tensors((path,))
        else:
            begin, end = tf.cast(begin, tf.int64), tf.cast(end, tf.int64)
            whole = end < 0
            zero = tf.constant(0, tf.int64)
            units = tf.data.Dataset.from_tensors((path, tf.where(whole, zero, begin), tf.where(whole, zero, end), zero,
                                                  tf.where(whole, tf.constant(-1, tf.int64), zero)))
        return self.source.unit_examples(units)

    def piece_examples(self, piece: Piece) -> tf.data.Dataset:
        return self.examples(tf.constant(self.path(piece.name)), piece.begin, piece.end)
