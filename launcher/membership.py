"""Which workers the chief trains with under ParameterServerStrategy: lost ones are left out, returning ones added.

TensorFlow waits at start-up, with no deadline, for every worker its spec lists, so a worker host gone for good
would hold every later chief start. The rule:

- a chief always starts without the workers lost at that moment (a lost one is never waited for);
- a worker that stays lost (host silent, node gone, restarts used up) for `launcher.worker_lost_after_s` while the
  chief trains is dropped: the chief is stopped (SIGTERM: it checkpoints at once) and restarted without it;
- a dropped worker that runs again is added back the same way, its process started afresh (one that lived
  through its host's silence held the chief's first step with it for 8 s to minutes);
- with fewer than `launcher.min_workers` workers the chief is held, and the launcher says why.

Each change is kept with its cost: seconds from the loss (or return) to training again, and steps redone.
"""

from __future__ import annotations

import dataclasses
import time

from launcher.records import TaskRecord, TaskState

GONE_STATES = (TaskState.LOST, TaskState.FAILED)


@dataclasses.dataclass
class Change:
    """One membership change and what it cost."""

    what: str  # "dropped worker:1" or "added worker:1 back"
    since: float  # when the worker was lost (or answered again)
    step_before: int | None  # the lead's last optimizer step before its restart
    resumed_step: int | None = None  # its first step after the restart (from its heartbeat)
    training_at: float | None = None  # when the step moved again
    finished_at: float | None = None  # when the restarted lead ended the run, if it did before its step was seen

    def line(self) -> str:
        if self.finished_at is not None:
            return (f"{self.what}: the restarted lead trained to the end {self.finished_at - self.since:.0f} s after "
                    f"the {'loss' if self.what.startswith('dropped') else 'return'}")
        if self.training_at is None:
            return f"{self.what}: training had not resumed when the run ended"
        redone = max(0, (self.step_before or 0) - (self.resumed_step or 0))
        return (f"{self.what}: training again {self.training_at - self.since:.0f} s after the "
                f"{'loss' if self.what.startswith('dropped') else 'return'}, {redone} step(s) redone")


class Membership:
    """The member workers and the changes made to them; the supervisor carries the changes out."""

    def __init__(self, supervisor):
        self.supervisor = supervisor
        self.workers = [r for r in supervisor.records.values() if r.task.job == "worker"]
        self.members = {r.name for r in self.workers}
        self.gone_since: dict[str, float] = {}
        self.changes: list[Change] = []
        self.pending: list[Change] = []  # waiting for the lead's step to move after its restart
        self.holding = False

    @property
    def enabled(self) -> bool:
        return self.supervisor.strategy.name == "parameter_server" and bool(self.workers)

    def live(self) -> list[TaskRecord]:
        return [r for r in self.workers if r.state == TaskState.RUNNING]

    def indices(self) -> tuple[int, ...]:
        return tuple(r.task.index for r in self.workers if r.name in self.members)

    def describe(self) -> str:
        return ", ".join(r.name for r in self.workers if r.name in self.members) or "no worker"

    def for_start(self) -> tuple[int, ...] | None:
        """The workers a chief starting now trains with: all but the lost ones (None: every worker, as listed)."""
        if not self.enabled:
            return None
        running = {r.name for r in self.workers if r.state not in GONE_STATES}  # restarting: back in seconds
        for record in self.workers:
            if record.name in self.members and record.name not in running:
                self._change(f"dropped {record.name}", self.gone_since.get(record.name, time.monotonic()))
                self.members.discard(record.name)
        return None if len(self.members) == len(self.workers) else self.indices()

    def set_trainer_workers(self, workers: tuple[int, ...] | None) -> None:
        """The workers the next chief trains with; every backend builds its command line from this config."""
        supervisor = self.supervisor
        if workers == supervisor.config.trainer_workers:
            return
        supervisor.config = dataclasses.replace(supervisor.config, trainer_workers=workers)
        for host in supervisor.hosts.values():
            host.config = supervisor.config
        supervisor.say(f"{supervisor.lead.name} trains with {self.describe()}")

    def follow(self, now: float) -> None:
        """Restarts the lead with the workers that run when one stays lost, or comes back."""
        reason, supervisor = self.tick(now), self.supervisor
        lead = supervisor.lead
        if reason is None or lead.state in (TaskState.EXITED, TaskState.FAILED, TaskState.LOST):
            return
        supervisor.held_for = [r for r in supervisor.held_for if r.task.job != "worker"]  # no waiting for workers
        added = self.record_added(lead.step)
        if added:  # it lived through its host's silence: its connections may still wait on packets the cut dropped
            supervisor.say(f"{', '.join(r.name for r in added)} started afresh to join (a process that lived "
                           "through the cut can hold the chief's first step for minutes)")
            for record in added:
                supervisor.hosts[record.host].stop([record.task])
            supervisor.start_now(added)
        if lead.state in (TaskState.RUNNING, TaskState.STARTING):
            supervisor.say(f"{reason}: stopping {lead.name} (it writes a checkpoint) to start it with the workers "
                           "running")
            supervisor.hosts[lead.host].stop([lead.task])
        elif lead.restart_at != float("inf") or not all(r.state == TaskState.RUNNING
                                                        for r in supervisor.records.values() if r.task.job == "ps"):
            return  # a restart is already due, or every ps is not back yet
        lead.state, lead.restart_at, lead.counts_as_restart = TaskState.RESTARTING, now, False

    def tick(self, now: float) -> str | None:
        """A reason to restart the lead with other workers, or None; also times the changes in flight."""
        if not self.enabled:
            return None
        self._time_changes(now)
        for record in self.workers:
            if record.state in GONE_STATES:
                self.gone_since.setdefault(record.name, now)
            else:
                self.gone_since.pop(record.name, None)
        lost_s = self.supervisor.settings.worker_lost_after_s
        dropped = [r for r in self.workers if r.name in self.members and r.name in self.gone_since
                   and now - self.gone_since[r.name] >= lost_s]
        returned = [r for r in self.live() if r.name not in self.members]
        if dropped:
            return f"{', '.join(r.name for r in dropped)} lost for {lost_s:.0f} s (launcher.worker_lost_after_s)"
        if returned:
            return f"{', '.join(r.name for r in returned)} running again"
        return None

    def enough(self) -> bool:
        """Whether enough workers run for the chief to start (launcher.min_workers)."""
        return not self.enabled or len(self.live()) >= self.supervisor.settings.min_workers

    def hold_reason(self) -> str:
        running = len(self.live())
        return (f"{running} of {len(self.workers)} workers running, fewer than launcher.min_workers "
                f"({self.supervisor.settings.min_workers}); training holds until enough workers answer")

    def record_added(self, step_before: int | None) -> list[TaskRecord]:
        """Called as the lead restarts: workers running again become members (timed from now); returns them."""
        added = [r for r in self.live() if r.name not in self.members]
        for record in added:
            self.members.add(record.name)
            self._change(f"added {record.name} back", time.monotonic(), step_before)
        return added

    def _change(self, what: str, since: float, step_before: int | None = None) -> None:
        change = Change(what, since, step_before if step_before is not None else self.supervisor.lead.step)
        self.changes.append(change)
        self.pending.append(change)

    def _time_changes(self, now: float) -> None:
        lead = self.supervisor.lead
        if lead.state != TaskState.RUNNING or lead.step is None:
            return
        for change in list(self.pending):
            if change.resumed_step is None:
                change.resumed_step = lead.step
            elif lead.step > change.resumed_step:
                change.training_at = now
                self.pending.remove(change)
                self.supervisor.say(change.line())

    def lead_finished(self, now: float) -> None:
        """The lead ended the run: changes whose restart it trained through before its step was seen are settled."""
        for change in self.pending:
            change.finished_at = now
            self.supervisor.say(change.line())
        self.pending.clear()

    def lines(self) -> list[str]:
        return [c.line() for c in self.changes]
