"""A trainer that loses a task it needs (a ps, a peer worker) exits with one line and code 3, not a traceback.

Code 3 tells the launcher that a restart may help (the task comes back): it is never taken for a failure that
repeats at every start, and the log keeps TensorFlow's reason in one line instead of a page of stack.
"""

from __future__ import annotations

import contextlib
import re
import sys

import tensorflow as tf

from common.errors import CLUSTER_UNAVAILABLE_EXIT_CODE

LOST_TASK_ERRORS = (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError,
                    tf.errors.DeadlineExceededError)
REMOTE_TARGET = re.compile(r"remote target /job:(\w+)/replica:\d+/task:(\d+)")  # the innermost comes first
FIRST_ROOT_ERROR = re.compile(r"\(0\) (\w+:.+)")


def lost_task_reason(error: BaseException) -> str:
    """TensorFlow's reason for a lost task in one line: a peer's "aborted by" line, else the task whose call
    failed and the first root error (`ps:0: UNAVAILABLE: failed to connect ...`), else the message's first line."""
    text = (getattr(error, "message", "") or str(error)).strip()
    lines = text.splitlines() or [""]
    aborted = next((line for line in lines if "aborted by" in line), None)
    if aborted:
        return aborted.strip()[:200]
    root, target = FIRST_ROOT_ERROR.search(text), REMOTE_TARGET.search(text)
    cause = root[1].strip() if root else lines[0].strip()
    return (f"{target[1]}:{target[2]}: {cause}" if target else cause)[:200]


@contextlib.contextmanager
def exit_when_a_task_is_lost(log, what: str, then: str):
    """Inside: a lost-task error from TensorFlow logs `what (Error: reason); exiting so then` and exits 3."""
    try:
        yield
    except LOST_TASK_ERRORS as error:
        log.error("%s (%s: %s); exiting so %s", what, type(error).__name__, lost_task_reason(error), then)
        sys.exit(CLUSTER_UNAVAILABLE_EXIT_CODE)
