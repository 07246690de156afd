"""The Criteo click logs (see data/criteo_layout.py): lines parsed in chunks, numeric features log-scaled, ids hashed.

Preprocessing (data/preprocessing.py, the function an exported model wraps): each integer feature becomes
log(1 + max(x, 0)) (empty: 0); each categorical value (empty included, as its own "missing" value) is hashed
together with its feature number and `salt` into a 62-bit id (a hashed table takes it modulo its rows, so
frequent values land anywhere in the table, hence on any ps). Lines are
checked in chunks: a malformed one stops the run with one line naming the file and line number (read again in
Python to say what is wrong), or with `skip_corrupt` is dropped, said in the reading task's log and counted for
the run summary (data/skipped.py).
"""

from __future__ import annotations

import functools
import re
import sys

import numpy as np
import tensorflow as tf

from common.errors import Problem
from data import failures, line_ranges, skipped
from data.criteo_layout import FIELDS, INTEGER, NUMERIC_FEATURES, line_problem, lines_before, open_text
from data.criteo_splits import CriteoFiles, LineRange, criteo_counts
from data.preprocessing import CriteoPreprocessing
from data.source import DataSource

CHUNK = 1024  # lines parsed together
CYCLE_LENGTH = 4  # files one worker reads at once
PIECES_PER_WORKER = 4  # byte ranges per worker, shuffled and read CYCLE_LENGTH at a time
MARKER = "pscluster: malformed Criteo line"
WHERE = re.compile(r"(.*?)(:| byte )(\d+)")


def _columns(parts) -> tuple[np.ndarray, ...]:
    """Parts as unit columns: path, first byte, end byte, first line, lines (-1: all). A byte range reads no
    lines, a line range (a gzipped file) no bytes."""
    rows = [(part.path, 0, 0, part.first, part.count) if isinstance(part, LineRange) else
            (part.path, part.begin, part.end, 0, 0) for part in parts]
    paths, *numbers = zip(*rows, strict=True) if rows else ((),) * 5
    return (np.asarray(paths, dtype=np.str_), *(np.asarray(n, dtype=np.int64) for n in numbers))


def _lines(path, begin, end, first, count) -> tf.data.Dataset:
    """(where, number, line) of one part: `where` + number names the line (path:line, or path byte offset)."""
    compression = tf.where(tf.strings.regex_full_match(path, r".*\.gz"), "GZIP", "")
    numbered = tf.data.TextLineDataset(path, compression_type=compression).skip(first).take(count).enumerate(
        start=first + 1)
    where = tf.strings.join([path, ":"])
    return line_ranges.read_lines(path, begin, end).concatenate(
        numbered.map(lambda number, line: (where, number, line)))


def _well_formed(fields: tf.Tensor, counts: tf.Tensor) -> tf.Tensor:
    """Per line: 40 fields, a 0/1 label, integer (or empty) numerics, hexadecimal (or empty) categories."""
    numeric = tf.strings.regex_full_match(fields[:, 1:1 + NUMERIC_FEATURES], INTEGER.pattern)
    categorical = tf.strings.regex_full_match(fields[:, 1 + NUMERIC_FEATURES:], r"[0-9a-fA-F]*")
    return ((counts == FIELDS) & tf.strings.regex_full_match(fields[:, 0], "[01]")
            & tf.reduce_all(numeric, axis=1) & tf.reduce_all(categorical, axis=1))


def _raw_features(fields: tf.Tensor) -> tuple[dict, tf.Tensor]:
    """Well-formed fields [n, 40] -> ({integers int64 [n, 13] (empty: 0), categories string [n, 26]}, labels
    [n]): the features as they are in the data, what an exported model takes."""
    numbers = fields[:, 1:1 + NUMERIC_FEATURES]
    integers = tf.strings.to_number(tf.where(numbers == "", "0", numbers), tf.int64)
    return {"integers": integers, "categories": fields[:, 1 + NUMERIC_FEATURES:]}, \
        tf.strings.to_number(fields[:, 0], tf.float32)


def _checked_chunk(skip: bool, preprocess, flagged: bool = False):
    """Parses a chunk of lines into examples: raw features, then `preprocess` (None: left raw) on the chunk; with
    `flagged`, every line as (features, label, well formed?, its number: byte offset or line number), a malformed
    one with blank features, for the reader to count (follow mode)."""
    def parse(paths, numbers, lines):
        split = tf.strings.split(tf.strings.regex_replace(lines, "\r$", ""), "\t")
        fields = split.to_tensor(default_value="", shape=[None, FIELDS])
        ok = _well_formed(fields, split.row_lengths())
        first_bad = tf.argmin(tf.cast(ok, tf.int32))
        named = tf.strings.join([paths[first_bad], tf.strings.as_string(numbers[first_bad])])
        if flagged:
            report = tf.no_op()
        elif skip:
            bad = tf.reduce_sum(tf.cast(~ok, tf.int64))
            report = tf.cond(bad > 0, lambda: tf.group(skipped.counted(bad), tf.print(
                "warning: skipped", bad, "malformed Criteo line(s), the first", named, output_stream=sys.stderr)),
                tf.no_op)
        else:
            report = tf.debugging.Assert(tf.reduce_all(ok), [MARKER, named])
        with tf.control_dependencies([report]):
            fields = tf.where(ok[:, tf.newaxis], fields, "0")
        features, labels = _raw_features(fields)
        if preprocess is not None:
            features = preprocess(features)
        if flagged:
            return tf.data.Dataset.from_tensor_slices((features, labels, ok, numbers))
        kept = tf.data.Dataset.from_tensor_slices((features, labels, ok))
        return kept.filter(lambda features, label, ok: ok).map(lambda features, label, ok: (features, label))

    return parse


def load(files: CriteoFiles, *, salt: int = 0, skip_corrupt: bool = False,
         byte_ranges: bool = True) -> DataSource:
    """Each part is a read unit: with at least as many as workers, workers shard by part; with fewer, plain
    training files are cut by bytes (`byte_ranges`), else every worker reads all and keeps its share."""
    train = files.parts["train"]
    preprocessing = CriteoPreprocessing(salt)

    def reader(preprocess, flagged: bool = False):
        def read(units: tf.data.Dataset) -> tf.data.Dataset:
            lines = units.interleave(_lines, cycle_length=CYCLE_LENGTH, num_parallel_calls=tf.data.AUTOTUNE,
                                     deterministic=True)
            return lines.batch(CHUNK).interleave(_checked_chunk(skip_corrupt, preprocess, flagged), cycle_length=2,
                                                 num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

        return read

    @functools.lru_cache(maxsize=None)
    def cut(workers: int) -> list[tuple]:
        pieces = line_ranges.cut(train, workers * PIECES_PER_WORKER)
        return [_columns(sum(pieces[k * PIECES_PER_WORKER:(k + 1) * PIECES_PER_WORKER], ())) for k in range(workers)]

    sizes, counted = criteo_counts(files)
    counting = "counted" if counted else "estimated from file sizes and a sample of lines (large files are not counted)"
    cuttable = byte_ranges and not any(isinstance(part, LineRange) for part in train)
    return DataSource(name="criteo", num_classes=2, sizes=sizes,
                      units={split: _columns(parts) for split, parts in files.parts.items()}, units_are_files=True,
                      read=reader(preprocessing), read_raw=reader(None), read_flagged=reader(preprocessing, True),
                      features=preprocessing.feature_spec,
                      preprocessing=preprocessing, skip_corrupt=skip_corrupt, cut=cut if cuttable else None,
                      note=f"{files.note}; examples {counting}")


def _problem(where: str) -> Problem:
    """The bad line, read again in Python to say what is wrong with it (a byte offset becomes a line number)."""
    path, kind, number = WHERE.fullmatch(where).groups()
    with open_text(path) as handle:
        if kind == ":":
            line = next((text for current, text in enumerate(handle, start=1) if current == int(number)), b"")
        else:
            handle.seek(int(number))
            line = handle.readline()
            number = str(lines_before(path, int(number)) + 1)
    problem = line_problem(line.decode("utf-8", errors="replace").rstrip("\r\n")) or "is malformed"
    return Problem("data file", f"{path}:{number}", problem,
                   "fix or delete that line, or set training.skip_corrupt to true to skip such lines")


MALFORMED = failures.Failure(MARKER, _problem)


def malformed_lines_named():
    """Turns a pipeline failure on a malformed line into a UserError (one line, exit 2) naming file and line."""
    return failures.named(MALFORMED)
