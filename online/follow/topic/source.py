"""A followed topic's watch made from the run's options: its stream folder, its file format and the check each
message gets on the chief where the workers could not tell a malformed one."""

from __future__ import annotations

import os

from cluster.topic_address import TopicAddress
from online.follow.topic.spool import Spool
from online.follow.topic.watch import TopicWatch


def watch_topic(address: TopicAddress, data, files, options, log) -> TopicWatch:
    """The watch of a followed topic whose records go to `data`'s folder (the run's stream, RunFiles.stream)."""
    tfrecord = options.dataset == "tfrecord"
    spool = Spool(data.root, tfrecord=tfrecord, write_records=_tfrecords)
    return TopicWatch(address, spool, piece_bytes=data.piece_bytes, cut_after_s=options.data_poll_s, log=log,
                      output=files.output, problem=_record_check(options) if tfrecord else None)


def _record_check(options):
    """A TFRecord file is one piece: one record its workers cannot parse would fail all of it, so each message is
    checked here, and one that is not an example of the schema (or, without one, no tf.train.Example) skipped."""
    from data import tfrecord_schema

    schema = options.tfrecord_features or {}
    return lambda record: tfrecord_schema.record_problem(record, schema)


def _tfrecords(path: str, records: list[bytes]) -> None:
    """Serialized examples as a TFRecord file, flushed to disk."""
    import tensorflow as tf

    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
