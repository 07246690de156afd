"""What ends a follow-mode chief, told apart (pure logic): a data file gone (exit 2, one line naming it) against a
lost ps or resource (exit 3, which the launcher restarts), other errors (exit 1 with their traceback)."""

from __future__ import annotations

import types

import pytest

from common.errors import Problem, UserError

tf = pytest.importorskip("tensorflow")
from online.follow.errors import exit_code, lost_resource, removed_data_file  # noqa: E402
from common.lost_tasks import lost_task_reason  # noqa: E402

ROOT = "/data/clicks"
GONE = tf.errors.NotFoundError(None, None, "/data/clicks/2026/day_3.gz; No such file or directory\n\t [[{{node "
                                           "MultiDeviceIteratorGetNextFromShard}}]]")
LOST_VARIABLE = tf.errors.NotFoundError(None, None, "Resource localhost/_AnonymousVar41/N10tensorflow3VarE does "
                                                    "not exist.\nEncountered when executing an operation using "
                                                    "EagerExecutor.")
LOST_TABLE = tf.errors.NotFoundError(None, None, "Resource Anonymous/MutableHashTable_7/N10tensorflow6lookup15Lookup"
                                                 "InterfaceE does not exist.")


def ended(error: BaseException, capsys) -> tuple[int, list[str], str]:
    said = []
    log = types.SimpleNamespace(error=lambda text, *args: said.append(text % args))
    code = exit_code(error, log, ROOT)
    return code, said, capsys.readouterr().err


def test_a_data_file_removed_while_read_is_one_line_naming_it_and_exit_2(capsys):
    assert removed_data_file(GONE, ROOT) == "/data/clicks/2026/day_3.gz" and not lost_resource(GONE)
    code, said, printed = ended(GONE, capsys)
    assert code == 2 and said == [] and printed == (
        "error: data file = '/data/clicks/2026/day_3.gz': was removed (or renamed) before it was trained; put it "
        "back: a file may go once output/safe_to_delete.json lists it\n")


@pytest.mark.parametrize("error", [LOST_VARIABLE, LOST_TABLE, tf.errors.UnavailableError(None, None, "Socket closed")],
                         ids=["variable", "table", "unavailable"])
def test_a_lost_resource_or_task_is_a_lost_task_that_a_restart_heals(error, capsys):
    assert removed_data_file(error, ROOT) is None
    code, said, printed = ended(error, capsys)
    first_line = error.message.splitlines()[0]
    assert code == 3 and printed == "" and said == [
        f"lost part of the cluster ({type(error).__name__}: {first_line}); exiting so the run resumes from the last "
        "checkpoint (pieces done since are trained again)"]


def test_other_endings_keep_their_codes(capsys):
    assert ended(UserError(Problem("training.x", 1, "is wrong", "fix it")), capsys)[:2] == (2, [])
    assert ended(SystemExit(3), capsys)[0] == 3 and ended(SystemExit(None), capsys)[0] == 0
    elsewhere = tf.errors.NotFoundError(None, None, "/tmp/other/file; No such file or directory")
    code, said, printed = ended(elsewhere, capsys)  # neither a data file nor a resource: unexpected
    assert code == 1 and said == [] and "NotFoundError: /tmp/other/file" in printed
    code, _, printed = ended(ValueError("a bug"), capsys)
    assert code == 1 and "ValueError: a bug" in printed


def test_a_lost_task_is_named_from_tensorflows_many_lines():
    message = ("Graph execution error:\n\n2 root error(s) found.\n  (0) UNAVAILABLE:  failed to connect to all "
               "addresses; last error: UNKNOWN: ipv4:127.0.0.1:54749: Failed to connect to remote host: Connection "
               "refused\nAdditional GRPC error information from remote target /job:ps/replica:0/task:0/device:CPU:0 "
               "while calling /tensorflow.eager.EagerService/RunComponentFunction:\n  (1) CANCELLED:  Function was "
               "cancelled before it was started\nAdditional GRPC error information from remote target "
               "/job:worker/replica:0/task:0 while calling /tensorflow.eager.EagerService/Enqueue:")
    reason = lost_task_reason(tf.errors.UnavailableError(None, None, message))
    assert reason.startswith("ps:0: UNAVAILABLE:  failed to connect to all addresses"), reason
    assert lost_task_reason(tf.errors.AbortedError(None, None, "x\nsession aborted by worker:1\n")) == \
        "session aborted by worker:1"
