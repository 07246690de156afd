"""Records that cannot be decoded: the run fails naming the file, or with skip_corrupt they are counted and skipped."""

from __future__ import annotations

import sys

import tensorflow as tf

from common.errors import Problem
from data import failures
from data.skipped import counted

MARKER = "pscluster: cannot decode"  # found again in the error text that reaches the chief from a worker
CHUNK = 64  # records decoded together


def _flag(names: tf.Tensor, found: tf.Tensor, images: tf.Tensor, labels: tf.Tensor, input_shape) -> tf.data.Dataset:
    """A chunk's decoded examples (at positions `found` of `names`) flagged True, then a blank flagged False for
    each name whose record did not decode."""
    decoded = tf.reduce_any(tf.equal(tf.range(tf.shape(names)[0])[:, tf.newaxis], found[tf.newaxis, :]), axis=1)
    failed = tf.boolean_mask(names, tf.logical_not(decoded))
    count = tf.shape(failed)[0]
    good = tf.data.Dataset.from_tensor_slices(
        (images, labels, tf.fill(tf.shape(labels), True), tf.gather(names, found)))
    bad = tf.data.Dataset.from_tensor_slices(
        (tf.zeros([count, *input_shape]), tf.fill([count], -1), tf.fill([count], False), failed))
    return good.concatenate(bad)


def _decode_chunk(decode, record_name, input_shape):
    """A chunk of records (as vectors) -> (image, label, decoded?, name) per record, those that failed last.

    Decoding a chunk at a time (in parallel, errors ignored) and then naming the records that did not come out
    keeps the bookkeeping per chunk: a small dataset per record, tried first, halved the rate on small images.
    """

    def chunk(*columns):
        names = record_name(*columns)
        decoded = tf.data.Dataset.from_tensor_slices((tf.range(tf.shape(names)[0]), *columns)).map(
            lambda position, *record: (position, *decode(*record)), num_parallel_calls=tf.data.AUTOTUNE)
        none_decoded = tf.data.Dataset.from_tensors(
            (tf.zeros([0], tf.int32), tf.zeros([0, *input_shape]), tf.zeros([0], tf.int32)))
        everything = decoded.ignore_errors().batch(CHUNK).concatenate(none_decoded).take(1)
        return everything.flat_map(lambda found, images, labels: _flag(names, found, images, labels, input_shape))

    return chunk


def _fail_on_first(flagged: tf.data.Dataset) -> tf.data.Dataset:
    def check(image, label, ok, name):
        with tf.control_dependencies([tf.debugging.Assert(ok, [MARKER, name])]):
            return tf.identity(image), label

    return flagged.map(check, num_parallel_calls=tf.data.AUTOTUNE)


def _skip_and_count(flagged: tf.data.Dataset) -> tf.data.Dataset:
    """Drops undecodable records, printing each with the count so far in this pass to the reading process's log."""

    def count(skipped, element):
        image, label, ok, name = element
        skipped += tf.cast(tf.logical_not(ok), tf.int64)
        report = tf.cond(ok, tf.no_op, lambda: tf.group(counted(1), tf.print(
            "warning: skipped", name, "(cannot be decoded as an image);", skipped,
            "skipped so far in this pass over the data", output_stream=sys.stderr)))
        with tf.control_dependencies([report]):
            return skipped, (tf.identity(image), label, ok)

    kept = flagged.scan(tf.constant(0, tf.int64), count).filter(lambda image, label, ok: ok)
    return kept.map(lambda image, label, ok: (image, label))


def decode_checked(records: tf.data.Dataset, decode, record_name, input_shape, *, skip: bool) -> tf.data.Dataset:
    """Decodes records in parallel; one that fails stops the pipeline naming it, or with `skip` is counted and dropped.

    `record_name` gets the record's parts as vectors (a chunk of records) and returns their names.
    """
    flagged = records.batch(CHUNK).interleave(_decode_chunk(decode, record_name, input_shape),
                                              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return _skip_and_count(flagged) if skip else _fail_on_first(flagged)


def decode_flagged(records: tf.data.Dataset, decode, record_name, input_shape) -> tf.data.Dataset:
    """Every record decoded as (image, label, decoded?, -1): one that does not decode comes blank, flagged False
    (follow mode counts and drops it)."""
    flagged = records.batch(CHUNK).interleave(_decode_chunk(decode, record_name, input_shape),
                                              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return flagged.map(lambda image, label, ok, name: (image, label, ok, tf.constant(-1, tf.int64)))


UNDECODABLE = failures.Failure(MARKER, lambda where: Problem(
    "data file", where, "cannot be decoded (corrupt, or not jpg, png, bmp or gif)",
    "replace or delete it, or set training.skip_corrupt to true to skip such files"))


def undecodable_records_named():
    """Turns a pipeline failure on an undecodable record into a UserError (one line, exit 2) naming the file."""
    return failures.named(UNDECODABLE)
