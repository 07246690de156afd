"""What the supervisor knows of each task: its state machine and its last observed facts."""

from __future__ import annotations

import dataclasses
import enum
import time
from concurrent.futures import Future, ThreadPoolExecutor

from cluster.config import Task


class TaskState(enum.Enum):
    """A task's life in the supervisor.

    STARTING → RUNNING → EXITED (finished its job: a trainer or the evaluator with exit 0)
    RUNNING → RESTARTING (died; waits its backoff) → STARTING
    RUNNING → FAILED (user error, or restarts used up: the run stops)
    any → LOST (its host stopped answering) → RUNNING/RESTARTING when the host answers again
    any → STOPPED (the launcher stopped it at the end of the run)
    """

    STARTING = "starting"
    RUNNING = "running"
    RESTARTING = "restarting"
    EXITED = "exited"
    FAILED = "failed"
    LOST = "lost"
    STOPPED = "stopped"


DONE_STATES = (TaskState.EXITED, TaskState.FAILED)


@dataclasses.dataclass
class TaskRecord:
    """What the supervisor knows of one task; times are the launcher's monotonic clock."""

    task: Task
    state: TaskState = TaskState.STARTING
    restarts: int = 0
    pid: int | None = None
    exit_code: int | None = None
    uptime_s: float = 0.0
    last_line: str = ""
    restart_at: float = 0.0
    counts_as_restart: bool = True
    started_at: float = 0.0
    step: int | None = None  # the optimizer step the lead reports now (None outside training: an epoch's end)
    last_step: int | None = None  # the last step this start of the lead reported, kept through such moments
    waiting: bool = False  # the lead's last heartbeat said it waits for data: it got past its start
    step_changed_at: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def name(self) -> str:
        return self.task.name

    @property
    def host(self) -> str:
        return self.task.address.host


class RunFailed(Exception):
    """The run cannot go on; the message names the first root cause, `code` is the launcher's exit code for it."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


class BackgroundCalls:
    """At most one call in flight per key, answered on a later tick: a slow host never stalls the loop."""

    def __init__(self):
        self.executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="host")
        self.in_flight: dict[str, Future] = {}
        self.submitted: dict[str, float] = {}

    def take(self, key: str, call) -> Future | None:
        """The finished call for `key` if there is one; otherwise starts `call` (unless one runs) and returns None."""
        future = self.in_flight.get(key)
        if future is None:
            self.in_flight[key], self.submitted[key] = self.executor.submit(call), time.monotonic()
            return None
        if not future.done():
            return None
        del self.in_flight[key]
        return future

    def waiting_s(self, key: str) -> float:
        """How long the call for `key` has been running unanswered (0 when none runs)."""
        future = self.in_flight.get(key)
        return time.monotonic() - self.submitted[key] if future is not None and not future.done() else 0.0
