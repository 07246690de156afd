"""The backend seam: where a cluster's tasks run (this machine, an ssh host, ...), behind one typed interface.

A backend serves the tasks of one place. The supervisor only ever calls these methods and reads these records;
a new kind of place (a scheduler, a container platform) is one more module implementing `Backend`, registered
in `launcher/backends/__init__.py`.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from typing import Any, Callable

from cluster.config import ClusterConfig, Task
from cluster.run_files import BestRecord, RunSummary


class HostError(Exception):
    """Something went wrong reaching or running the agent on a place; the message says which and what."""


class HostUnreachable(HostError):
    """The place did not answer (down, cut off, or refusing us)."""


class AgentFailed(HostError):
    """The place answered, but what runs our tasks there failed (e.g. its python lacks the project's packages)."""


class BootstrapFailed(AgentFailed):
    """A place's environment could not be built; the message says why and what to do, in a line or two."""


class StopOutcome(str, enum.Enum):
    STOPPED = "stopped"
    KILLED = "killed after SIGTERM was ignored"
    ALREADY_EXITED = "had already exited"
    NOT_STARTED = "not started"

    @property
    def was_running(self) -> bool:
        return self in (StopOutcome.STOPPED, StopOutcome.KILLED)


def _record(cls, raw: dict):
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in raw.items() if k in names})


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskStatus:
    """One task as its place sees it now."""

    task: str
    pid: int | None
    running: bool
    exit_code: int | None
    uptime_s: float
    last_line: str
    step: int | None = None  # the lead's optimizer step while it trains (from this process's progress file)
    waiting: bool = False  # the lead's last heartbeat said it waits for data (follow mode, caught up)

    @classmethod
    def from_json(cls, raw: dict) -> "TaskStatus":
        return _record(cls, raw)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StopResult:
    """What stopping one task did."""

    task: str
    pid: int | None
    outcome: StopOutcome

    @classmethod
    def from_json(cls, raw: dict) -> "StopResult":
        return cls(task=raw["task"], pid=raw.get("pid"), outcome=StopOutcome(raw["outcome"]))


@dataclasses.dataclass(frozen=True, kw_only=True)
class PreflightReport:
    """Problems that would stop tasks at a place (one line each), and its Python/TensorFlow versions."""

    problems: list[str]
    versions: dict[str, Any]

    @classmethod
    def from_json(cls, raw: dict) -> "PreflightReport":
        return _record(cls, raw)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FirewallReport:
    """The nftables table guarding a place's task ports."""

    table: str
    ports: list[int]

    @classmethod
    def from_json(cls, raw: dict) -> "FirewallReport":
        return _record(cls, raw)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunOutputs:
    """The lead's output directory as its own host sees it: the summary and best record, with their ages in
    seconds by that host's clock (so "written during this run" needs no clock shared with the launcher)."""

    output: str
    summary: RunSummary | None = None
    summary_age_s: float | None = None
    best: BestRecord | None = None
    best_age_s: float | None = None

    @classmethod
    def from_json(cls, raw: dict) -> "RunOutputs":
        summary, best = raw.get("summary"), raw.get("best")
        return cls(output=raw["output"], summary=RunSummary(**summary) if summary else None,
                   summary_age_s=raw.get("summary_age_s"), best=BestRecord(**best) if best else None,
                   best_age_s=raw.get("best_age_s"))


def as_json(record) -> dict:
    """A record as the agent prints it (enums by value)."""
    return {k: (v.value if isinstance(v, enum.Enum) else v) for k, v in dataclasses.asdict(record).items()}


class Backend(abc.ABC):
    """The tasks of one place: start, stop, status, logs, preflight and firewall, as typed records."""

    name: str
    is_remote: bool
    config: ClusterConfig

    def prepare(self, say: Callable[[str], None]) -> None:
        """Makes the place ready before anything starts (copy code, install packages); nothing by default."""
        return None

    def take_new_config(self, config: ClusterConfig) -> None:
        """Uses an edited cluster (`sh run.sh reload`) from now on; a remote place gets its new cluster file."""
        self.config = config

    @abc.abstractmethod
    def start(self, tasks: list[Task]) -> list[TaskStatus]:
        """Starts each task unless it already runs."""

    @abc.abstractmethod
    def stop(self, tasks: list[Task], quick: bool = False) -> list[StopResult]:
        """Stops each task and everything it started; safe for tasks that are not running. The lead is given
        launcher.stop_grace_s to write its checkpoint, unless `quick` (it is frozen, or its ps are gone)."""

    @abc.abstractmethod
    def status(self, tasks: list[Task]) -> list[TaskStatus]:
        """Each task's state now."""

    @abc.abstractmethod
    def preflight(self, tasks: list[Task]) -> PreflightReport:
        """What would stop these tasks here, found before any starts."""

    def set_aside_previous_run(self) -> str | None:
        """Moves the lead's previous run out of its output_dir (never deletes it); returns where it went."""
        raise HostError(f"{self.name}: this backend cannot set a previous run aside; use a new output_dir")

    def firewall_on(self, tasks: list[Task]) -> FirewallReport:
        raise HostError(f"{self.name}: this backend has no firewall")

    def firewall_off(self) -> bool:
        """Removes this cluster's firewall table here; True when one was removed."""
        return False

    def drop_connections(self, peers: list[str]) -> int:
        """Closes this place's connections to `host:port` peers that vanished; returns how many."""
        return 0

    def fetch_logs(self) -> None:
        """Brings the task logs into the launcher's logs directory (nothing when they are already there)."""
        return None

    def close(self) -> None:
        """Ends what this backend keeps open to its place between calls (an ssh host's status session)."""
        return None

    def ending(self) -> str | None:
        """Why this place's time is nearly up (a scheduler warned of the allocation's time limit), or None: a lead
        stopped then is not started again there, since the end would kill it before its next checkpoint."""
        return None

    def reachable(self) -> bool | None:
        """Whether the place's transport answers right now (False: cut off); None when this backend cannot tell,
        and then a slow answer never counts as a lost place."""
        return None

    @abc.abstractmethod
    def run_outputs(self) -> RunOutputs:
        """The lead's summary and best record, read where the lead wrote them."""

    @abc.abstractmethod
    def fetch_tensorboard(self, local_dir: str) -> str:
        """Where the lead's TensorBoard events can be read on the launcher's machine (copied there if need be)."""
