"""Runs a cluster to the end: start in order, watch every task, carry out the healing policy, stop everything."""

from __future__ import annotations

import time

from cluster.config import ClusterConfig, Task
from common import net
from common.errors import CLUSTER_UNAVAILABLE_EXIT_CODE
from launcher import observing, stopping
from launcher.backends import backends_for
from launcher.backends.base import AgentFailed, HostUnreachable, TaskStatus
from launcher.healing import Action, HealingPolicy
from launcher.membership import Membership
from launcher.outages import HostOutages
from launcher.records import DONE_STATES, BackgroundCalls, RunFailed, TaskRecord, TaskState

__all__ = ["RunFailed", "Supervisor", "TaskState"]


class Supervisor:
    """Starts the cluster's tasks in order and keeps them alive until the trainers and evaluator are done.

    The strategy table says which jobs run, which train (they exit when done; task 0 leads) and which serve.
    """

    def __init__(self, config: ClusterConfig, say):
        self.config, self.say = config, say
        self.settings, self.strategy = config.launcher, config.strategy
        self.policy = HealingPolicy(config.launcher, config.strategy)
        self.hosts = backends_for(config)
        launched = config.strategy.launched_jobs  # records in the file's order, as status shows them
        self.records = {t.name: TaskRecord(t) for t in config.tasks() if t.job in launched}
        self.lead = self.records[config.lead.name]
        self.background = BackgroundCalls()
        self.chief_done_at: float | None = None
        self.outages = HostOutages(self)
        self.held_for: list[TaskRecord] = []  # what the held lead waits for, besides every ps
        self.membership = Membership(self)
        self.healing_blocked_by = ""  # the error that stopped the last healing pass
        self.ps_restart_due = False  # the lead died on live ps: they are stopped (at the next healing pass) and start
        # again with it

    def _jobs(self, *jobs: str) -> list[TaskRecord]:
        """The records of these jobs, in the order the jobs are named (ps before workers: the start order)."""
        return [self.records[t.name] for t in self.config.tasks(jobs) if t.name in self.records]

    # ----- starting -------------------------------------------------------------------------------------
    def start_servers(self) -> None:
        """Every ps and worker (behind each host's allowlist if the firewall is on), once all their ports answer."""
        if self.config.firewall:
            for name, host in self.hosts.items():
                rules = host.firewall_on([t for t in self.config.tasks() if t.address.host == name])
                self.say(f"firewall on {name}: table {rules.table} guards ports {rules.ports}")
        if servers := self._jobs(*self.strategy.server_jobs):
            self.start_records(servers)

    def start_cluster(self) -> None:
        """ps and workers until their ports answer, then the trainers (the chief), then the evaluator."""
        self.start_servers()
        self.start_now(self._jobs(self.strategy.trainer_job))
        self.start_now(self._jobs("evaluator"))

    def start_now(self, records: list[TaskRecord]) -> None:
        """Starts these tasks (a lead on the workers that run) without waiting for their ports."""
        if self.lead in records:
            self.membership.set_trainer_workers(self.membership.for_start())
        by_host: dict[str, list[TaskRecord]] = {}
        for record in records:
            by_host.setdefault(record.host, []).append(record)
        for name, group in by_host.items():
            rows = self.hosts[name].start([r.task for r in group])
            for record, row in zip(group, rows, strict=True):
                record.state, record.pid, record.exit_code = TaskState.STARTING, row.pid, None
                record.step = record.last_step = None
                record.waiting = False
                record.started_at = record.step_changed_at = time.monotonic()
                self.say(f"{record.name} started on {name} (pid {row.pid})")

    def start_records(self, records: list[TaskRecord]) -> None:
        """Starts these servers (ps before workers) and waits until their ports answer."""
        self.start_now(records)
        self._wait_for_servers([r.task for r in records])

    def _wait_for_servers(self, tasks: list[Task]) -> None:
        silent = net.wait_until_listening(tasks, self.settings.ready_timeout_s)
        if silent:
            raise RunFailed("did not come up within {:.0f} s: {}".format(
                self.settings.ready_timeout_s, ", ".join(f"{t.name} ({self.records[t.name].last_line or 'no log'})"
                                                         for t in silent)))
        for task in tasks:
            self.records[task.name].state = TaskState.RUNNING
        self.say("ready: " + ", ".join(t.name for t in tasks))

    # ----- watching -------------------------------------------------------------------------------------
    def run(self, on_tick=lambda: None) -> int:
        """The loop: observe, heal, and return the lead trainer's exit code once trainers and evaluator are done."""
        while True:
            observing.observe(self)
            on_tick()  # the status file shows what was observed before healing acts on it (a stop may take a while)
            self._heal_unless_a_host_fails()
            if self._finished():
                return self.lead.exit_code or 0
            time.sleep(self.settings.poll_s)

    def _heal_unless_a_host_fails(self) -> None:
        """A host that stops answering mid-action delays healing (its next status call marks it lost) and is said
        once; one whose agent fails ends the run with its error."""
        try:
            self._heal()
        except HostUnreachable as error:
            if str(error) != self.healing_blocked_by:
                self.say(f"healing waits for a host: {error}")
            self.healing_blocked_by = str(error)
        except AgentFailed as error:
            raise RunFailed(str(error)) from None
        else:
            self.healing_blocked_by = ""

    def _apply(self, rows: list[TaskStatus], asked_at: float) -> None:
        """Takes rows into the records, except rows asked before a task's latest start (they describe the past) and
        rows of tasks a reload took out while the question was in flight. Of the tasks seen gone in one look, those
        that left because a task they needed went away come last: the one that went away is the cause, and it is
        the one the group restarts with (worker:0 may notice a killed worker:1 and exit before the look)."""
        for row in sorted(rows, key=_left_because_of_another):
            record = self.records.get(row.task)
            if record is None:
                continue
            if record.started_at <= asked_at and record.state not in (*DONE_STATES, TaskState.RESTARTING):
                self._update(record, row)

    def _update(self, record: TaskRecord, row: TaskStatus) -> None:
        record.last_line, record.pid, record.uptime_s = row.last_line, row.pid, row.uptime_s
        record.waiting = row.waiting
        if row.step != record.step:
            record.step, record.step_changed_at = row.step, time.monotonic()
        if row.step is not None:
            record.last_step = row.step
        if not row.running:
            if record.state in (TaskState.RUNNING, TaskState.STARTING, TaskState.LOST):
                self._exited(record, row.exit_code)
            return
        if record.state in (TaskState.LOST, TaskState.STARTING) and (
                record.task.job not in self.strategy.server_jobs or net.answers(record.host, record.task.address.port)):
            record.state = TaskState.RUNNING

    def _exited(self, record: TaskRecord, code: int | None) -> None:
        record.exit_code = code
        decision = self.policy.on_exit(record, code, ending=self.hosts[record.host].ending())
        self.say(decision.message)
        if decision.action == Action.FINISHED:
            record.state = TaskState.EXITED
            if record is self.lead:
                self.chief_done_at = time.monotonic()
                self.membership.lead_finished(self.chief_done_at)
        elif decision.action == Action.DROP:
            record.state = TaskState.FAILED
        elif decision.action == Action.HOLD:  # shown held, as a lead waiting for its ps; stopped at the end
            record.state, record.restart_at, record.exit_code = TaskState.RESTARTING, float("inf"), None
        elif decision.action == Action.FAIL_RUN:
            record.state = TaskState.FAILED
            raise RunFailed(decision.message, code=decision.run_exit_code)
        else:
            record.state, record.restart_at = TaskState.RESTARTING, time.monotonic() + decision.delay_s
            record.counts_as_restart = decision.counts
            if decision.hold_chief:
                self.hold_lead("until every ps is back")
            if decision.restart_group:
                self._restart_group_with(record)
            if decision.restart_ps:
                self._restart_ps_with(record)

    def _restart_group_with(self, failed: TaskRecord) -> None:
        """Collectives cannot lose a member: stop the other trainers and start them all again together."""
        others = [r for r in self._jobs(self.strategy.trainer_job) if r is not failed
                  and r.state not in (*DONE_STATES, TaskState.RESTARTING)]
        for record in others:
            self.hosts[record.host].stop([record.task])
            record.state, record.restart_at, record.counts_as_restart = TaskState.RESTARTING, failed.restart_at, False
        if others:
            self.say(f"stopped {', '.join(r.name for r in others)}: the whole group restarts with "
                     f"{failed.name} and resumes from the last checkpoint")

    def _restart_ps_with(self, lead: TaskRecord) -> None:
        """The lead waits until every ps has started again and answers: it resumes from its checkpoint either way,
        and fresh ps hold only its variables, not the dead lead's as well. The ps are stopped by `_heal`, where a
        host that does not answer only delays it."""
        if any(r.state in (TaskState.RUNNING, TaskState.STARTING) for r in self._jobs("ps")):
            self.ps_restart_due, lead.restart_at = True, float("inf")  # _heal starts it once every ps answers

    def _stop_ps_for_lead(self) -> None:
        running = [r for r in self._jobs("ps") if r.state in (TaskState.RUNNING, TaskState.STARTING)]
        for record in running:
            self.hosts[record.host].stop([record.task])
            record.state, record.restart_at, record.counts_as_restart = TaskState.RESTARTING, 0.0, False
        self.ps_restart_due = False
        if running:
            self.say(f"stopped {', '.join(r.name for r in running)}: they start again with {self.lead.name}, which "
                     "resumes from its last checkpoint (the dead one's tables would stay on them beside the new)")

    def hold_lead(self, until: str) -> bool:
        """Stops the lead now (a lost ps took its variables, or training cannot go on without a lost host) and
        starts it again, from its last checkpoint, once every ps and every lost worker answers (unless its place's
        time is nearly up: see Backend.ending); False when the lead is done or on a lost host itself."""
        chief = self.lead
        if chief.state in (*DONE_STATES, TaskState.LOST):
            return False
        self.held_for = [r for r in self.records.values() if r.state == TaskState.LOST]
        if chief.state != TaskState.RESTARTING:
            self.hosts[chief.host].stop([chief.task], quick=True)  # its variables may be gone: nothing to save
            self.say(f"{chief.name} stopped {until}; it will resume from its last checkpoint")
        chief.state, chief.restart_at, chief.counts_as_restart = TaskState.RESTARTING, float("inf"), False
        return True

    # ----- healing --------------------------------------------------------------------------------------
    def _heal(self) -> None:
        if self.ps_restart_due:
            self._stop_ps_for_lead()
        now = time.monotonic()
        waited = {r.name: r for r in [*self._jobs("ps"), *self.held_for]}.values()
        ending = self.hosts[self.lead.host].ending()  # the lead would be killed before its next checkpoint
        if self.lead.restart_at == float("inf") and not ending and all(r.state == TaskState.RUNNING for r in waited):
            others = "".join(f" and {r.name}" for r in self.held_for if r.task.job != "ps")
            self.say(f"every ps{others} answer again: starting {self.lead.name} again")
            self.outages.reconnect(self.held_for)
            self.lead.restart_at, self.held_for = now, []
        self.membership.follow(now)
        for record in self.records.values():
            if record.state == TaskState.RESTARTING and now >= record.restart_at:
                if record is self.lead and ending:
                    record.restart_at = float("inf")
                    self.say(f"{record.name} is not started again: {ending}; the next `sh run.sh` resumes from "
                             "its last checkpoint")
                    continue
                if record is self.lead and not self.membership.enough():
                    if not self.membership.holding:
                        self.say(f"{record.name} held: {self.membership.hold_reason()}")
                    self.membership.holding = True
                    continue
                self.membership.holding = False
                record.restarts += int(record.counts_as_restart)
                self.start_now([record])
        self._watch_for_stall(now)
        self.outages.tick(now)

    def _watch_for_stall(self, now: float) -> None:
        lead = self.lead
        if lead.state == TaskState.LOST and now - lead.step_changed_at > self.settings.stall_timeout_s:
            raise RunFailed(f"{lead.name}'s host {lead.host} has not answered for "
                            f"{now - lead.step_changed_at:.0f} s")
        servers_up = all(r.state == TaskState.RUNNING for r in self._jobs(*self.strategy.server_jobs))
        reason = self.policy.stall(lead, servers_up, now) if lead.state == TaskState.RUNNING else None
        if reason:
            self.say(f"stall: {reason}; restarting it")
            self.hosts[lead.host].stop([lead.task], quick=True)  # a frozen chief cannot checkpoint
            self._exited(lead, None)

    def _finished(self) -> bool:
        if self.chief_done_at is None:
            return False
        waiting = [r for r in self.records.values() if self.policy.finishes(r) and r.state not in DONE_STATES]
        grace_s = self.config.evaluation.idle_timeout_s + 60
        if waiting and time.monotonic() - self.chief_done_at > grace_s:
            self.say(f"{', '.join(r.name for r in waiting)} still running {grace_s:.0f} s after training "
                     "ended; stopping it")
            return True
        return not waiting

    # ----- stopping -------------------------------------------------------------------------------------
    def stop_everything(self) -> list[str]:
        """Stops every task, evaluator and chief first, on every host that answers; returns one line each."""
        return stopping.stop_everything(self.config, self.hosts, self.records)

    def close(self) -> None:
        """Ends what the backends keep open to their hosts between looks (an ssh host's status session)."""
        for host in self.hosts.values():
            host.close()

    def fetch_logs(self, wait: bool = False) -> None:
        """Copies remote logs here in the background (or now, with `wait`, at the end of a run)."""
        for name, host in self.hosts.items():
            if not host.is_remote:
                continue
            if wait:
                host.fetch_logs()
            else:
                self.background.take(f"logs {name}", host.fetch_logs)


def _left_because_of_another(row: TaskStatus) -> bool:
    return not row.running and row.exit_code == CLUSTER_UNAVAILABLE_EXIT_CODE
