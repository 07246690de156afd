"""What ends a follow-mode chief, told apart in one place, and how it ends: at once, whatever its pieces are doing.

A data file under data_dir gone before it was trained is the user's to fix (exit 2, one line naming it). A lost
ps or worker, or a NotFoundError for a resource rather than a file ("Resource .../... does not exist": a ps
restarted and its variables and tables are gone), is a lost task that a restart heals (exit 3, one line). A stop
from outside (SIGTERM) is exit 4 (coordinator/preemption.py); anything else exit 1 with its traceback. The
process then ends without the interpreter's shutdown, which would wait for every piece still running on a worker
(hours for a whole gzip file) and for TensorFlow's coordinator threads.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import traceback

import tensorflow as tf

from common.errors import CLUSTER_UNAVAILABLE_EXIT_CODE, USER_ERROR_EXIT_CODE, Problem, UserError
from common.exit_file import code_of, end_process
from coordinator.lost_tasks import LOST_TASK_ERRORS

PUT_IT_BACK = "put it back: a file may go once a serving version lists it in trained_through.json"
LOST_RESOURCE = re.compile(r"\b(Resource|Container)\b[^\n]* does not exist")
UNEXPECTED_EXIT_CODE = 1  # what Python itself exits with on an uncaught exception


def removed_before_trained(path: str) -> None:
    """Stops the run, naming `path`, when a file about to be handed out is gone."""
    if not os.path.exists(path):
        raise UserError(Problem("data file", path, "was removed (or renamed) before it was trained", PUT_IT_BACK))


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
        reason = ((getattr(error, "message", "") or "").strip().splitlines() or [""])[0]
        log.error("lost part of the cluster (%s: %s); exiting so the run resumes from the last checkpoint (pieces "
                  "done since are trained again)", type(error).__name__, reason[:200])
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
