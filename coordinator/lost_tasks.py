"""A trainer that loses a task it needs (a ps, a peer worker) exits with one line and code 3, not a traceback.

Code 3 tells the launcher that a restart may help (the task comes back): it is never taken for a failure that
repeats at every start, and the log keeps TensorFlow's reason in one line instead of a page of stack.
"""

from __future__ import annotations

import contextlib
import sys

import tensorflow as tf

from common.errors import CLUSTER_UNAVAILABLE_EXIT_CODE

LOST_TASK_ERRORS = (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError,
                    tf.errors.DeadlineExceededError)


@contextlib.contextmanager
def exit_when_a_task_is_lost(log, what: str, then: str):
    """Inside: a lost-task error from TensorFlow logs `what (Error: reason); exiting so then` and exits 3."""
    try:
        yield
    except LOST_TASK_ERRORS as error:
        lines = (error.message or "").strip().splitlines() or [""]
        reason = next((line for line in lines if "aborted by" in line), lines[0])
        log.error("%s (%s: %s); exiting so %s", what, type(error).__name__, reason[:200], then)
        sys.exit(CLUSTER_UNAVAILABLE_EXIT_CODE)
