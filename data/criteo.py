"""The Criteo click logs (see data/criteo_layout.py): lines parsed in chunks, numeric features log-scaled, ids hashed.

Preprocessing: each integer feature becomes log(1 + max(x, 0)) (empty: 0); each categorical value (empty
included, as its own "missing" value) is hashed together with its feature number and `salt` into its table's
rows, so frequent values land anywhere in the table (hence on any ps), not in its first rows. Lines are checked
in chunks: a malformed one stops the run with one line naming the file and line number (read again in Python
to say what is wrong), or with `skip_corrupt` is dropped and counted in the reading task's log.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys

import tensorflow as tf

from data.criteo_layout import (CATEGORICAL_FEATURES, FIELDS, NUMERIC_FEATURES, criteo_counts, line_problem,
                                open_text)
from data.source import DataSource
from common.errors import Problem, UserError

CHUNK = 1024  # lines parsed together
CYCLE_LENGTH = 4  # files one worker reads at once
MARKER = "pscluster: malformed Criteo line"
NAMED = re.compile(re.escape(MARKER) + r"\] \[(.*?):(\d+)\]")


def _lines(path: tf.Tensor) -> tf.data.Dataset:
    """(path, line number from 1, line) of one file, gunzipped when its name ends in .gz."""
    compression = tf.where(tf.strings.regex_full_match(path, r".*\.gz"), "GZIP", "")
    lines = tf.data.TextLineDataset(path, compression_type=compression)
    return lines.enumerate(start=1).map(lambda number, line: (path, number, line))


def _well_formed(fields: tf.Tensor, counts: tf.Tensor) -> tf.Tensor:
    """Per line: 40 fields, a 0/1 label, integer (or empty) numerics, hexadecimal (or empty) categories."""
    numeric = tf.strings.regex_full_match(fields[:, 1:1 + NUMERIC_FEATURES], r"-?[0-9]*")
    categorical = tf.strings.regex_full_match(fields[:, 1 + NUMERIC_FEATURES:], r"[0-9a-fA-F]*")
    return ((counts == FIELDS) & tf.strings.regex_full_match(fields[:, 0], "[01]")
            & tf.reduce_all(numeric, axis=1) & tf.reduce_all(categorical, axis=1))


def _features(fields: tf.Tensor, table_rows: tf.Tensor, salt: int) -> tuple[dict, tf.Tensor]:
    """Well-formed fields [n, 40] -> ({dense [n, 13], ids [n, 26]}, labels [n])."""
    numbers = fields[:, 1:1 + NUMERIC_FEATURES]
    counts = tf.strings.to_number(tf.where(numbers == "", "0", numbers), tf.float32)
    columns = tf.constant([f"{k}:{salt}:" for k in range(CATEGORICAL_FEATURES)])
    keyed = tf.strings.join([tf.broadcast_to(columns, tf.shape(fields[:, 1 + NUMERIC_FEATURES:])),
                             tf.strings.lower(fields[:, 1 + NUMERIC_FEATURES:])])
    hashed = tf.strings.to_hash_bucket_fast(keyed, (1 << 62))
    features = {"dense": tf.math.log1p(tf.maximum(counts, 0.0)), "ids": tf.math.floormod(hashed, table_rows)}
    return features, tf.strings.to_number(fields[:, 0], tf.float32)


def _checked_chunk(skip: bool, table_rows: tf.Tensor, salt: int):
    def parse(paths, numbers, lines):
        split = tf.strings.split(tf.strings.regex_replace(lines, "\r$", ""), "\t")
        fields = split.to_tensor(default_value="", shape=[None, FIELDS])
        ok = _well_formed(fields, split.row_lengths())
        first_bad = tf.argmin(tf.cast(ok, tf.int32))
        named = tf.strings.join([paths[first_bad], ":", tf.strings.as_string(numbers[first_bad])])
        if skip:
            bad = tf.reduce_sum(tf.cast(~ok, tf.int64))
            report = tf.cond(bad > 0, lambda: tf.print("warning: skipped", bad, "malformed Criteo line(s), the first",
                                                         named, output_stream=sys.stderr), tf.no_op)
        else:
            report = tf.debugging.Assert(tf.reduce_all(ok), [MARKER, named])
        with tf.control_dependencies([report]):
            fields = tf.where(ok[:, tf.newaxis], fields, "0")
        features, labels = _features(fields, table_rows, salt)
        kept = tf.data.Dataset.from_tensor_slices((features, labels, ok))
        return kept.filter(lambda features, label, ok: ok).map(lambda features, label, ok: (features, label))

    return parse


def load(files: dict[str, tuple[str, ...]], *, table_rows: tuple[int, ...], salt: int = 0,
         skip_corrupt: bool = False) -> DataSource:
    """Each file is a read unit: with at least as many training files as workers, workers shard by file."""
    rows = tf.constant(table_rows, tf.int64)

    def read(units: tf.data.Dataset) -> tf.data.Dataset:
        lines = units.interleave(_lines, cycle_length=CYCLE_LENGTH, num_parallel_calls=tf.data.AUTOTUNE,
                                 deterministic=True)
        return lines.batch(CHUNK).interleave(_checked_chunk(skip_corrupt, rows, salt), cycle_length=2,
                                             num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    return DataSource(name="criteo", input_shape=(NUMERIC_FEATURES + CATEGORICAL_FEATURES,), num_classes=2,
                      sizes=criteo_counts(files), units={split: (paths,) for split, paths in files.items()},
                      units_are_files=True, read=read, skip_corrupt=skip_corrupt)


def _problem_of(path: str, number: int) -> str:
    with open_text(path) as handle:
        for current, line in enumerate(handle, start=1):
            if current == number:
                return line_problem(line.decode("utf-8", errors="replace").rstrip("\r\n")) or "is malformed"
    return "is malformed"


class _WithoutMalformed(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return MARKER not in record.getMessage()


@contextlib.contextmanager
def malformed_lines_named():
    """Turns a pipeline failure on a malformed line into a UserError (one line, exit 2) naming file and line."""
    quiet = _WithoutMalformed()
    logging.getLogger("tensorflow").addFilter(quiet)
    try:
        yield
    except tf.errors.OpError as error:
        found = NAMED.search(str(error))
        if not found:
            raise
        raise UserError(Problem("data file", f"{found[1]}:{found[2]}", _problem_of(found[1], int(found[2])),
                                "fix or delete that line, or set training.skip_corrupt to true to skip such "
                                "lines")) from None
    finally:
        logging.getLogger("tensorflow").removeFilter(quiet)
