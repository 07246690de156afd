"""The data of a follow-mode run: a folder whose files are trained as they land, each read in pieces by any worker.

Criteo click logs (plain or .gz, any names: train.txt, day_N, part-*; Kaggle's unlabelled test.txt is not
data) and TFRecord files (images, or records of any schema with `tfrecord_features`) are followed. The model
is built from, and exported for, the same DataSource a fixed run of these files would have (its features,
raw features and preprocessing), made with no files yet: every attribute FollowedData does not define is that
source's. `examples(path, begin, end)` builds one piece's examples in-graph, so one traced function reads any
piece on whichever worker runs it; `flagged_examples` keeps malformed records, flagged, for the piece to count.
`verdict(path)` says what a file that stood still is: whole, unfinished, or unreadable (quarantined whole).
Malformed records are always skipped and counted in follow mode (training.max_bad_fraction bounds them).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import tensorflow as tf

from cluster.topic_address import is_topic
from cluster.training_names import ONE_HOT_LOSSES
from common.errors import UserError
from data import criteo, tfrecord, tfrecord_schema
from data.criteo_layout import line_problem, open_text
from data.criteo_splits import CriteoFiles
from data.folder import SAMPLE_FILES, data_files, natural_key
from data.pieces import WHOLE, Piece, cut_into_pieces, whole_file
from data.whole_files import (UNFINISHED, UNREADABLE, WHOLE as WHOLE_FILE, Verdict, gzip_missing, text_missing,
                              tfrecord_missing, verdict_of)

UNLABELLED = ("test.txt", "test.txt.gz")  # Kaggle's Criteo test file: no labels, so never training data
MB = 1 << 20


def _source_of_no_files(options):
    """The DataSource a fixed run of such files would have, with no files: its readers read any file given."""
    if options.dataset == "criteo":
        return criteo.load(CriteoFiles({"train": (), "validation": (), "test": ()}, ""), skip_corrupt=True)
    if options.tfrecord_features:
        return tfrecord_schema.schema_source(schema=options.tfrecord_features, numeric=options.numeric_features,
                                             categorical=options.categorical_features,
                                             num_classes=options.num_classes)
    return tfrecord.image_source(image_size=options.image_size, image_key=options.tfrecord_image_key,
                                 label_key=options.tfrecord_label_key, num_classes=options.tfrecord_num_classes)


@tf.function(input_signature=[tf.TensorSpec([], tf.string)])
def _read_through(path):
    """Reads every record of a TFRecord file (checking each CRC); one traced function for every file."""
    return tf.data.TFRecordDataset(path).reduce(tf.constant(0, tf.int64), lambda count, _: count + 1)


class FollowedData:
    """A followed folder: which files are data, when each is whole, its pieces, and a piece's examples."""

    def __init__(self, options, root: Path):
        self.root, self.kind, self.pattern = root, options.dataset, options.follow_pattern
        self.removes_trained = is_topic(options.data_dir)  # a topic's copy: its trained files go by design
        self.schema = options.tfrecord_features
        self.piece_bytes = max(1, round(options.piece_mb * MB))
        self.source = dataclasses.replace(_source_of_no_files(options), one_hot=options.loss in ONE_HOT_LOSSES,
                                          skip_corrupt=True)  # malformed records are skipped and counted

    def __getattr__(self, name: str):
        if name == "source":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.source, name)  # feature_spec, raw_spec, preprocessing, num_classes, name, ...

    def excluded(self, name: str) -> bool:
        """A name the pattern takes that is never data (Kaggle's unlabelled Criteo test file)."""
        return self.kind == "criteo" and name.rsplit("/", 1)[-1] in UNLABELLED

    def verdict(self, path: Path) -> Verdict:
        """What the file's bytes say once it stood still (data/whole_files.py): an empty file is whole (done at
        once); a Criteo file whose first line is not a Criteo line, a gzip file that does not inflate, a TFRecord
        file with a corrupted record (bad CRC) or whose first record does not match tfrecord_features cannot be
        read (quarantined whole). A TFRecord file is read through once here, as a gzip file is inflated once."""
        if path.stat().st_size == 0:
            return Verdict(WHOLE_FILE)
        if self.kind == "tfrecord":
            found = verdict_of(tfrecord_missing(path))
            return self._records_verdict(path) if found.kind != UNFINISHED else found
        found = verdict_of(gzip_missing(path) if path.name.endswith(".gz") else text_missing(path))
        if found.kind == UNREADABLE:
            return found
        first = _first_line(path)
        if first is None:  # no whole line yet
            return found
        problem = line_problem(first)
        return Verdict(UNREADABLE, f"is not Criteo data: its first line {problem}") if problem else found

    def trace_readers(self) -> None:
        """Traces, once, what `verdict` runs in TensorFlow; call it while every task of the cluster answers: a
        function traced later is registered on every task first, and a frozen worker would hold it."""
        if self.kind == "tfrecord":
            _read_through.get_concrete_function()

    def _records_verdict(self, path: Path) -> Verdict:
        try:
            _read_through(tf.constant(str(path)))
            if self.schema:
                tfrecord_schema.check_first(str(path), self.schema)
        except tf.errors.DataLossError as error:
            return Verdict(UNREADABLE, f"has a corrupted record ({(error.message or '').strip()[-200:]})")
        except UserError as error:
            return Verdict(UNREADABLE, "does not match training.tfrecord_features: " + "; ".join(
                problem.problem for problem in error.problems))
        return Verdict(WHOLE_FILE)

    def pieces(self, name: str, size: int) -> list[Piece]:
        """A plain Criteo file in byte ranges of about piece_mb; a gzip or TFRecord file whole; an empty file
        none (done at once)."""
        if size == 0:
            return []
        if self.kind == "criteo" and not name.endswith(".gz"):
            return cut_into_pieces(self.root, name, size, self.piece_bytes)
        return whole_file(name)

    def path(self, name: str) -> str:
        return str(self.root / name)

    def examples(self, path, begin, end, *, raw: bool = False) -> tf.data.Dataset:
        """The examples of bytes [begin, end) of `path`, or of the whole file when end is -1 (tensors allowed);
        with `raw`, the features as they are in the data. Malformed records are skipped (a note in this
        process's log)."""
        return self.source.unit_examples(self._units(path, begin, end), raw=raw)

    def flagged_examples(self, path, begin, end) -> tf.data.Dataset:
        """Every record of the piece as (features, label, well formed?, position) (DataSource.flagged_examples):
        what a piece trains on, counting what it skips."""
        return self.source.flagged_examples(self._units(path, begin, end))

    def _units(self, path, begin, end) -> tf.data.Dataset:
        if self.kind == "tfrecord":
            return tf.data.Dataset.from_tensors((path,))
        begin, end = tf.cast(begin, tf.int64), tf.cast(end, tf.int64)
        whole = end < 0
        zero = tf.constant(0, tf.int64)
        return tf.data.Dataset.from_tensors((path, tf.where(whole, zero, begin), tf.where(whole, zero, end), zero,
                                             tf.where(whole, tf.constant(-1, tf.int64), zero)))

    def piece_examples(self, piece: Piece, *, raw: bool = False) -> tf.data.Dataset:
        return self.examples(tf.constant(self.path(piece.name)), piece.begin, piece.end, raw=raw)

    def split(self, name: str, *, raw: bool = False) -> tf.data.Dataset:
        """Follow mode has no splits: any split is every example of the newest SAMPLE_FILES files there now that
        hold bytes, in name order (what reference inputs, samples of ids and a metric's labels are taken from):
        only those files are read, however many the folder holds."""
        newest = sorted((stat[1], natural_key(name), name) for name, stat in
                        data_files(self.root, self.pattern, self.excluded).items() if stat[0] > 0)[-SAMPLE_FILES:]
        names = sorted((name for _, _, name in newest), key=natural_key)
        if not names:
            return self.examples(tf.constant(""), 0, 0, raw=raw).take(0)
        paths = tf.data.Dataset.from_tensor_slices([self.path(n) for n in names])
        return paths.flat_map(lambda path: self.examples(path, 0, WHOLE, raw=raw))


def _first_line(path: Path) -> str | None:
    """The file's first line without its newline, or None when it has no whole line yet."""
    try:
        with open_text(path) as handle:
            first = handle.readline()
    except EOFError:  # a gzip stream cut inside its first line
        return None
    return first.decode("utf-8", errors="replace").rstrip("\r\n") if first.endswith(b"\n") else None
