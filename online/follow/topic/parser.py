"""A followed topic's messages in the user's own format (`training.topic_parser` = "package.module:function"):
the chief calls `function(message_bytes)` on each message as it reads it, and trains what it returns: a Criteo
line (str or bytes), or with dataset tfrecord a tf.train.Example or its serialized bytes. None, an error, or a
line with a line break in it skips the message, counted as malformed with the reason. It runs in the chief's
reading thread, in Python: a few microseconds a message keep up with a topic; heavy work there slows the reading.

`python -m online.follow.topic.parser SPEC` prints, as JSON, one line per problem (the launcher runs it on the
lead's host before any task starts).
"""

from __future__ import annotations

import inspect
import json
import sys
from typing import Callable

from cluster import user_model
from common.errors import Problem, UserError

FIELD = "training.topic_parser"
RETURNS = "a message's record to train"


def load(spec: str) -> Callable:
    """The user's function; raises UserError (one line) when the module or the function is not there, or when it
    cannot be called with one argument."""
    function = user_model.load(spec, field=FIELD, returning=RETURNS)
    try:
        inspect.signature(function).bind(b"")
    except TypeError:
        raise UserError(Problem(FIELD, spec, "cannot be called with one argument (a message's bytes)",
                                "take the message as the one required parameter")) from None
    except ValueError:
        pass  # a builtin without a signature: its first message says
    return function


def preparing(parse: Callable, *, tfrecord: bool) -> Callable[[bytes], tuple[bytes, str]]:
    """(record to keep, why it cannot be trained or '') of a message's bytes, through the user's `parse`."""

    def prepare(value: bytes) -> tuple[bytes, str]:
        try:
            record = parse(value)
        except Exception as error:  # noqa: BLE001 - the message, not the run: skipped and counted
            return b"", f"{FIELD} raised {type(error).__name__}: {error}"
        if record is None:
            return b"", f"{FIELD} returned None"
        if tfrecord and hasattr(record, "SerializeToString"):
            record = record.SerializeToString()
        if isinstance(record, str):
            record = record.encode()
        if not isinstance(record, bytes):
            return b"", (f"{FIELD} returned a value of type {type(record).__name__}, not "
                         f"{'an example' if tfrecord else 'a line'}")
        if not tfrecord:
            record = record.rstrip(b"\r\n")
            if b"\n" in record:
                return b"", f"{FIELD} returned more than one line"
        return record, ""

    return prepare


if __name__ == "__main__":
    try:
        load(sys.argv[1])
        print(json.dumps([]))
    except UserError as error:
        print(json.dumps([problem.text() for problem in error.problems]))
