"""Hosts that stop answering: seen within seconds, handled by the roles they hold, timed until training again.

A host cut off the network drops packets without closing connections, so nothing fails by itself: the
supervisor declares a host lost once its status call has gone unanswered for `HOST_SILENT_S` and its ssh port
does not even accept a connection (a loaded host is slow, not gone), or once ssh fails; then

- a lost ps (its variables out of reach): the lead is held (stopped) and started again, from its last
  checkpoint, once every ps answers again;
- lost workers only: the lead's connections to them are closed, so TensorFlow's calls fail and it carries on
  with the other workers; if the lead's optimizer step then does not move for `WORKER_LOSS_GRACE_S`, the
  launcher says so and holds the lead as for a ps, until the lost workers answer again;
- the lead's own host: training waits for it; the run stops after `stall_timeout_s` without an answer.

When the host answers again the launcher reports how long it was gone and, if the lead's step has not moved since
the loss (held, or a short outage TensorFlow had not yet worked around), the time from its return to training again.
"""

from __future__ import annotations

import dataclasses
import time

from cluster.config import Task
from launcher.backends.base import HostError
from launcher.records import TaskRecord, TaskState

HOST_SILENT_S = 6.0
WORKER_LOSS_GRACE_S = 20.0


@dataclasses.dataclass
class Outage:
    host: str
    tasks: list[str]
    silent_since: float  # when the host last answered (or the unanswered call was made)
    step_at_loss: int | None
    lost_at: float = dataclasses.field(default_factory=time.monotonic)
    held_lead: bool = False
    hold_until: str | None = None  # a hold decided on observing, carried out on the next healing pass
    returned_at: float | None = None
    step_at_return: int | None = None


class HostOutages:
    """What the supervisor does about hosts that stop answering; `lines` keeps one line per outage for the report."""

    def __init__(self, supervisor):
        self.supervisor = supervisor
        self.current: dict[str, Outage] = {}
        self.recovering: list[Outage] = []  # back, waiting for the lead's step to move
        self.lines: list[str] = []
        self.last_answer: dict[str, float] = {}

    @property
    def lead(self) -> TaskRecord:
        return self.supervisor.lead

    def lost(self, host: str, records: list[TaskRecord], reason: str) -> None:
        newly = [r for r in records if r.state not in (TaskState.LOST, TaskState.RESTARTING)]
        if not newly:
            return
        silent_since = self.last_answer.get(host, time.monotonic())
        reason = f"no answer for {time.monotonic() - silent_since:.0f} s" + (f": {reason}" if reason else "")
        for record in newly:
            record.state = TaskState.LOST
        outage = self.current.setdefault(host, Outage(host, [], silent_since, self.lead.last_step))
        outage.tasks += [r.name for r in newly]
        names = ", ".join(r.name for r in newly)
        say, jobs = self.supervisor.say, {r.task.job for r in newly}
        if self.lead in newly:
            say(f"{host} lost ({reason}): {names}; training waits for it (the run stops after "
                f"{self.supervisor.settings.stall_timeout_s:.0f} s without an answer, launcher.stall_timeout_s)")
        elif "ps" in jobs:
            say(f"{host} lost ({reason}): {names}; the variables on it are out of reach")
            outage.hold_until = "until every ps answers again"  # after `status` shows the loss
        elif jobs & set(self.supervisor.strategy.server_jobs):
            others = [r.name for r in self.supervisor.records.values()
                      if r.task.job == "worker" and r.state == TaskState.RUNNING]
            say(f"{host} lost ({reason}): {names}; training goes on with {', '.join(others) or 'no worker'}")
            self._cut_lead_from([r.task for r in newly])
        else:
            say(f"{host} lost ({reason}): {names}")

    def _lead_trains_with(self, outage: Outage) -> bool:
        """Whether the lead's cluster still lists a task of this outage (one that membership dropped is not waited
        for, so a lead that then stalls is no longer this outage's doing)."""
        membership = self.supervisor.membership
        dropped = [name for name in outage.tasks if name.startswith("worker:") and name not in membership.members]
        return not membership.enabled or len(dropped) < len(outage.tasks)

    def _cut_lead_from(self, tasks: list[Task]) -> None:
        """A host cut off the network drops packets without closing connections, and TensorFlow would wait on
        it forever: close the lead's connections to its tasks, so their calls fail and training moves on."""
        lead = self.lead
        if tasks and lead.state in (TaskState.RUNNING, TaskState.STARTING) and \
                self._close_connections(lead.host, tasks, f"{lead.name}'s") is not None:
            self.supervisor.say(f"closed {lead.name}'s connections to {', '.join(t.name for t in tasks)}")

    def _close_connections(self, host: str, tasks: list[Task], whose: str) -> int | None:
        """How many connections `host` had to these tasks, now closed; None (said) when the host cannot be asked."""
        try:
            return self.supervisor.hosts[host].drop_connections([str(t.address) for t in tasks])
        except HostError as error:
            self.supervisor.say(f"could not close {whose} connections to {', '.join(t.name for t in tasks)}: "
                                f"{error}")
            return None

    def answered(self, host: str) -> None:
        self.last_answer[host] = time.monotonic()
        outage = self.current.pop(host, None)
        if outage is None:
            return
        now, lead = time.monotonic(), self.lead
        outage.returned_at, outage.step_at_return = now, None if outage.held_lead else lead.last_step
        gone = f"{host} answers again after {now - outage.silent_since:.0f} s without an answer"
        if outage.held_lead:
            self.supervisor.say(f"{gone}")
            self.recovering.append(outage)
        elif lead.state == TaskState.EXITED:
            self.supervisor.say(f"{gone}; {lead.name} ended meanwhile")
            self.lines.append(f"{host} gone {now - outage.silent_since:.0f} s; {lead.name} ended meanwhile")
        elif outage.step_at_loss is not None and outage.step_at_return == outage.step_at_loss:
            self.supervisor.say(f"{gone}; {lead.name}'s step has not moved since the loss ({lead.last_step})")
            self.recovering.append(outage)  # timed until the step moves, as after a hold
        elif outage.step_at_loss is not None and outage.step_at_return is not None:
            went_on = f"step {outage.step_at_loss} at the loss, {outage.step_at_return} now"
            self.supervisor.say(f"{gone}; training went on meanwhile ({went_on})")
            self.lines.append(f"{host} gone {now - outage.silent_since:.0f} s; training went on ({went_on})")
        else:
            self.supervisor.say(gone)
            self.lines.append(f"{host} gone {now - outage.silent_since:.0f} s")

    def reconnect(self, returned: list[TaskRecord]) -> None:
        """Closes the connections running tasks kept to tasks whose host was cut: one with data in flight waits
        out TCP's retransmission backoff (after a 60 s cut, some 40 s more) before it carries anything again,
        and a fresh lead's first step would wait with it."""
        if not returned:  # a held lead that waited for ps alone (an elastic run drops lost workers)
            return
        holders = {r.host for r in self.supervisor.records.values()
                   if r.state == TaskState.RUNNING and r not in returned}
        for host in sorted(holders):
            closed = self._close_connections(host, [r.task for r in returned], f"{host}'s")
            if closed:
                self.supervisor.say(f"closed {closed} connection(s) on {host} that lived through the cut")

    def tick(self, now: float) -> None:
        """Checks that training really goes on without lost workers, and times each return to training."""
        lead = self.lead
        for outage in self.current.values():
            if outage.hold_until and not outage.held_lead:
                outage.held_lead, outage.hold_until = self.supervisor.hold_lead(outage.hold_until), None
            frozen_s = now - max(lead.step_changed_at, outage.lost_at)  # counted once its connections are closed
            if (not outage.held_lead and self._lead_trains_with(outage) and lead.state == TaskState.RUNNING
                    and lead.step is not None
                    and lead.step == outage.step_at_loss and frozen_s > WORKER_LOSS_GRACE_S):
                self.supervisor.say(f"TensorFlow has not advanced {lead.name}'s step ({lead.step}) for "
                                    f"{frozen_s:.0f} s without {', '.join(outage.tasks)}")
                outage.held_lead = self.supervisor.hold_lead(f"until {outage.host} answers again")
        for outage in list(self.recovering):
            if lead.state != TaskState.RUNNING or lead.step is None:
                continue
            if outage.step_at_return is None:
                outage.step_at_return = lead.step  # the restarted lead's first heartbeat: the restored step
            elif lead.step > outage.step_at_return:
                took = lead.step_changed_at - outage.returned_at
                self.supervisor.say(f"training again {took:.0f} s after {outage.host} answered again "
                                    f"({lead.name} at step {lead.step})")
                self.lines.append(f"{outage.host} gone {outage.returned_at - outage.silent_since:.0f} s; "
                                  f"training again {took:.0f} s after it answered again")
                self.recovering.remove(outage)
