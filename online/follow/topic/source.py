"""A followed topic's watch made from the run's options: its stream folder, its file format, the user's parser of
its messages, if any, and the check each message gets on the chief where the workers could not tell a malformed
one."""

from __future__ import annotations

import os

from cluster.topic_address import TopicAddress
from online.follow.topic import parser
from online.follow.topic.spool import Spool
from online.follow.topic.watch import TopicWatch


def watch_topic(address: TopicAddress, data, files, options, log) -> TopicWatch:
    """The watch of a followed topic whose records go to `data`'s folder (the run's stream, RunFiles.stream)."""
    tfrecord = options.dataset == "tfrecord"
    spool = Spool(data.root, tfrecord=tfrecord, write_records=_tfrecords)
    return TopicWatch(address, spool, piece_bytes=data.piece_bytes, cut_after_s=options.data_poll_s, log=log,
                      output=files.output, prepare=_preparing(options, tfrecord))


def _preparing(options, tfrecord: bool):
    """What each message becomes on the chief (None: its bytes as they are, a Criteo line): the user's parser's
    record (parser.py), then, for a TFRecord file, the schema's check: a TFRecord file is one piece, and one record
    its workers cannot parse would fail all of it, so one that is not an example of the schema (or, without one, no
    tf.train.Example) is skipped here."""
    parse = parser.preparing(parser.load(options.topic_parser), tfrecord=tfrecord) if options.topic_parser else None
    if not tfrecord:
        return parse
    from data import tfrecord_schema

    schema = options.tfrecord_features or {}

    def checked(value: bytes) -> tuple[bytes, str]:
        record, why = parse(value) if parse else (value, "")
        return record, why or tfrecord_schema.record_problem(record, schema)

    return checked


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
