"""Failures a restart cannot help: the lead failing twice in a row with the same error before it reached training.

A restore that cannot match the checkpoint, or a module that cannot be imported, fails the same way at every
start; restarting it with back-off until `max_restarts` only hides the cause behind minutes of retries. An error
that may pass (exit 3: a task it needs did not answer), a stop from outside (exit 4), or a death by a signal
(no exit code) never counts; nor does a failure after the lead reported an optimizer step, since it trained, or
said it waits for data (a follow-mode chief caught up: it got past its start, and only a new file would make it
train), whether seen while it ran or in its last heartbeat.
"""

from __future__ import annotations

from common.errors import CLUSTER_UNAVAILABLE_EXIT_CODE, PREEMPTED_EXIT_CODE
from launcher.records import TaskRecord

MAY_PASS = (None, 0, CLUSTER_UNAVAILABLE_EXIT_CODE, PREEMPTED_EXIT_CODE)


class RepeatedFailures:
    """Remembers the lead's last failure before training, and which of its lives reached training."""

    def __init__(self):
        self.previous: dict[str, str] = {}  # task -> its last failure before training (exit code and error)
        self.trained_life: dict[str, float] = {}  # task -> start time of its latest life that reported a step

    def observe(self, record: TaskRecord) -> None:
        """Called while the task runs: a reported optimizer step, or waiting for data, means this life reached
        training."""
        if record.step is not None or record.waiting:
            self.trained_life[record.name] = record.started_at

    def repeated(self, record: TaskRecord, code: int | None) -> bool:
        """Whether this exit repeats the task's previous one (both before training, same code and error line);
        remembers it for the next exit."""
        self.observe(record)  # its last heartbeat, read as it ended, may say it was waiting
        trained = self.trained_life.get(record.name) == record.started_at
        if code in MAY_PASS or trained:
            self.previous.pop(record.name, None)
            return False
        failure = f"exit {code}: {record.last_line}"
        again = self.previous.get(record.name) == failure
        self.previous[record.name] = failure
        return again
