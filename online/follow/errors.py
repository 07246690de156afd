"""What goes wrong in follow mode, told apart in one place, and how the chief ends: at once, whatever its pieces do.

A piece's data (its file unreadable, a corrupted record, a record that does not match the schema, the file gone
while it was read) comes back to the chief for that piece alone (a DataFailure); a closure that fails makes
TensorFlow's ClusterCoordinator cancel the closures queued behind it (at the next `schedule`): those come back
cancelled and are handed out again, what they trained staying in the model, as when a worker is lost. What ends
the chief: a data file under data_dir gone before it was trained (when it escapes a piece), the user's to fix
(exit 2, one line naming it); a lost ps or worker, or a NotFoundError for a resource rather than a file
("Resource .../... does not exist": a ps restarted and its variables and tables are gone), a lost task that a
restart heals (exit 3, one line); a stop from outside (SIGTERM) exit 4 (common/preemption.py); anything else
exit 1 with its traceback. The process then ends without the interpreter's shutdown, which would wait for every
piece still running on a worker (hours for a whole gzip file) and for TensorFlow's coordinator threads.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import traceback
from typing import NamedTuple

import tensorflow as tf

from common.errors import CLUSTER_UNAVAILABLE_EXIT_CODE, USER_ERROR_EXIT_CODE, Problem, UserError
from common.exit_file import code_of, end_process
from common.lost_tasks import LOST_TASK_ERRORS, lost_task_reason

PUT_IT_BACK = "put it back: a file may go once output/safe_to_delete.json lists it"
LOST_RESOURCE = re.compile(r"\b(Resource|Container)\b[^\n]* does not exist")
UNEXPECTED_EXIT_CODE = 1  # what Python itself exits with on an uncaught exception


class DataFailure(NamedTuple):
    """A piece (its `key`) that did not train for its data: `corrupt` when the file cannot be read (quarantined
    at once), else something that may pass (tried again); `cancelled`: it did not run (another piece failed)."""

    key: tuple[int, int]
    why: str
    corrupt: bool = False
    cancelled: bool = False


def first_line(error: Exception) -> str:
    text = getattr(error, "message", None) or str(error)
    return next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)[-300:]


def is_data_error(error: Exception, data_root: str) -> bool:
    """A piece's data failed (not a task): a corrupted record or stream, or an error naming a file of the data
    folder (gone, unreadable, a record not matching the schema)."""
    if isinstance(error, tf.errors.DataLossError):
        return True
    if not isinstance(error, tf.errors.OpError) or isinstance(error, tf.errors.CancelledError):
        return False
    text = str(error)
    return data_root in text and not (lost_resource(error) and data_root not in text.split("does not exist")[0])


def piece_failure(key: tuple[int, int], error: Exception, data_root: str, *,
                  cancelling: bool = False) -> DataFailure | None:
    """The DataFailure of a piece that failed with `error`, or None when it is not the data's (raise it). While
    `cancelling` (another piece's data failed moments ago: TensorFlow cancels the running closures, which come back
    as CancelledErrors of any wording, "RemoteExecuteNode::RunAsync" among them) every CancelledError is that."""
    if is_cancelled(error, cancelling):
        return DataFailure(key, "cancelled", cancelled=True)
    if not is_data_error(error, data_root):
        return None
    corrupt = isinstance(error, (tf.errors.DataLossError, tf.errors.InvalidArgumentError))
    return DataFailure(key, f"cannot be read ({first_line(error)})", corrupt=corrupt)


def is_cancelled(error: Exception, cancelling: bool) -> bool:
    """A closure TensorFlow cancelled (queued, or running while `cancelling`), not a lost task."""
    if not isinstance(error, tf.errors.CancelledError):
        return False
    return cancelling or ("cancelled" in str(error).lower() and "/job:" not in str(error))


def removed_data_file(error: BaseException, data_root: str) -> str | None:
    """The file under `data_root` that a NotFoundError names (removed while its piece was read), else None."""
    if not isinstance(error, tf.errors.NotFoundError):
        return None
    found = re.search(re.escape(os.path.join(data_root, "")) + r"[^;\n\]'\"]+", error.message or "")
    return found[0].strip() if found else None


def lost_resource(error: BaseException) -> bool:
    """A NotFoundError for a resource of the cluster (a variable, a table, a container), not for a file."""
    return isinstance(error, tf.errors.NotFoundError) and bool(LOST_RESOURCE.search(error.message or ""))


def exit_code(error: BaseException, log, data_root: str) -> int:
    """The exit code `error` ends the chief with (the launcher acts on it), said once: a user error's lines, a
    lost task's one line, or the traceback of anything unexpected."""
    if isinstance(error, SystemExit):
        if isinstance(error.code, str):  # as the interpreter would
            print(error.code, file=sys.stderr)
        return code_of(error)
    path = removed_data_file(error, data_root)
    if path:
        error = UserError(Problem("data file", path, "was removed (or renamed) before it was trained", PUT_IT_BACK))
    if isinstance(error, UserError):
        for line in error.lines():
            print(line, file=sys.stderr)
        return USER_ERROR_EXIT_CODE
    if isinstance(error, LOST_TASK_ERRORS) or lost_resource(error):
        log.error("lost part of the cluster (%s: %s); exiting so the run resumes from the last checkpoint (pieces "
                  "done since are trained again)", type(error).__name__, lost_task_reason(error))
        return CLUSTER_UNAVAILABLE_EXIT_CODE
    traceback.print_exception(error)
    return UNEXPECTED_EXIT_CODE


@contextlib.contextmanager
def ends_at_once(log, data_root: str):
    """Inside: a follow-mode chief. However it leaves (its summary written, an error of any kind, a lost task),
    the process ends right there with the exit code recorded for the launcher; bad records on a worker are named
    first (data.bad_records_named)."""
    from data import bad_records_named

    try:
        with bad_records_named():
            yield
        code = 0
    except BaseException as error:  # noqa: BLE001 - every way out ends the process, with its code
        code = exit_code(error, log, data_root)
    end_process(code)
