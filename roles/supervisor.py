"""Runs a cluster to the end: start in order, watch every task, heal by policy, stop everything."""

from __future__ import annotations

import dataclasses
import enum
import time
from concurrent.futures import Future, ThreadPoolExecutor

from coordinator.options import PARAMETER_SERVER
from roles import probe, taskspec
from roles.config import ClusterConfig, Task
from roles.errors import USER_ERROR_EXIT_CODE
from roles.firewall import FirewallError
from roles.hosts import AgentFailed, HostError, HostUnreachable, host_for

SERVER_JOBS = ("ps", "worker")
START_ORDER = ("ps", "worker", "chief", "evaluator")


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


@dataclasses.dataclass
class TaskRecord:
    """What the supervisor knows of one task."""

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
    log_changed_at: float = dataclasses.field(default_factory=time.monotonic)


class RunFailed(Exception):
    """The run cannot go on; the message names the first root cause."""


class BackgroundCalls:
    """At most one call in flight per key, answered on a later tick: a slow host never stalls the loop."""

    def __init__(self):
        self.executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="host")
        self.in_flight: dict[str, Future] = {}

    def take(self, key: str, call) -> Future | None:
        """The finished call for `key` if there is one; otherwise starts `call` (unless one runs) and returns None."""
        future = self.in_flight.get(key)
        if future is None:
            self.in_flight[key] = self.executor.submit(call)
            return None
        if not future.done():
            return None
        del self.in_flight[key]
        return future


class Supervisor:
    """Starts the cluster's tasks in order and keeps them alive until the trainers and evaluator are done.

    Trainers run coordinator.train: the chief under parameter_server, mirrored and one_device, every worker
    under multi_worker_mirrored (worker 0 leads). Servers (ps and workers under parameter_server) never exit.
    """

    def __init__(self, config: ClusterConfig, say):
        self.config, self.say = config, say
        self.policy = config.launcher
        self.hosts = {name: host_for(config, name) for name in {t.address.host for t in config.tasks()}}
        launched = taskspec.launched_jobs(config)
        self.records = {t.name: TaskRecord(t) for t in config.tasks() if t.job in launched}
        self.parameter_server = config.training.strategy == PARAMETER_SERVER
        self.server_jobs = SERVER_JOBS if self.parameter_server else ()
        self.trainer_jobs = taskspec.trainer_jobs(config)
        self.lead = self.records[taskspec.lead_task(config).name]
        self.background = BackgroundCalls()
        self.chief_done_at: float | None = None

    # ----- starting -------------------------------------------------------------------------------------
    def start_servers(self) -> None:
        """Every ps and worker (behind each host's allowlist if the firewall is on), once all their ports answer."""
        if self.config.firewall:
            for name, host in self.hosts.items():
                rules = host.firewall_on([t for t in self.config.tasks() if t.address.host == name])
                self.say(f"firewall on {name}: table {rules['table']} guards ports {rules['ports']}")
        servers = self.config.tasks(self.server_jobs)
        if servers:
            self._start([self.records[t.name] for t in servers])
            self._wait_for_servers(servers)

    def start_cluster(self) -> None:
        """ps and workers until their ports answer, then the trainers (the chief), then the evaluator."""
        self.start_servers()
        for jobs in (self.trainer_jobs, ("evaluator",)):
            self._start([self.records[t.name] for t in self.config.tasks(jobs)])

    def _start(self, records: list[TaskRecord]) -> None:
        by_host: dict[str, list[TaskRecord]] = {}
        for record in records:
            by_host.setdefault(record.task.address.host, []).append(record)
        for name, group in by_host.items():
            rows = self.hosts[name].start([r.task for r in group])
            for record, row in zip(group, rows, strict=True):
                record.state, record.pid, record.exit_code = TaskState.STARTING, row["pid"], None
                record.log_changed_at = record.started_at = time.monotonic()
                self.say(f"{record.task.name} started on {name} (pid {row['pid']})")

    def _wait_for_servers(self, tasks: list[Task]) -> None:
        silent = probe.wait_until_listening(tasks, self.policy.ready_timeout_s)
        if silent:
            raise RunFailed("did not come up within {:.0f} s: {}".format(
                self.policy.ready_timeout_s, ", ".join(f"{t.name} ({self.records[t.name].last_line or 'no log'})"
                                                        for t in silent)))
        for task in tasks:
            self.records[task.name].state = TaskState.RUNNING
        self.say("ready: " + ", ".join(t.name for t in tasks))

    # ----- watching -------------------------------------------------------------------------------------
    def run(self, on_tick=lambda: None) -> int:
        """The loop: observe, heal, and return the lead trainer's exit code once trainers and evaluator are done."""
        while True:
            self._observe()
            self._heal()
            on_tick()
            if self._finished():
                return self.lead.exit_code or 0
            time.sleep(self.policy.poll_s)

    def _observe(self) -> None:
        for name, host in self.hosts.items():
            tasks = [r.task for r in self.records.values() if r.task.address.host == name
                     and r.state not in (TaskState.EXITED, TaskState.FAILED)]
            if not tasks:
                continue
            if not host.is_remote:
                self._apply(host.status(tasks), asked_at=time.monotonic())
                continue
            answer = self.background.take(f"status {name}", lambda host=host, tasks=tasks: (
                time.monotonic(), host.status(tasks)))
            if answer is None:
                continue
            try:
                asked_at, rows = answer.result()
                self._apply(rows, asked_at)
            except HostUnreachable as error:
                self._host_lost([self.records[t.name] for t in tasks], str(error))
            except AgentFailed as error:
                raise RunFailed(str(error)) from None

    def _apply(self, rows: list[dict], asked_at: float) -> None:
        """Takes rows into the records, except rows asked before a task's latest start (they describe the past)."""
        for row in rows:
            record = self.records[row["task"]]
            if record.started_at <= asked_at and record.state not in (
                    TaskState.EXITED, TaskState.FAILED, TaskState.RESTARTING):
                self._update(record, row)

    def _host_lost(self, records: list[TaskRecord], reason: str) -> None:
        newly_lost = [r for r in records if r.state != TaskState.LOST]
        for record in newly_lost:
            self.say(f"{record.task.name} lost: {reason}")
            record.state = TaskState.LOST
        self._cut_chief_from([r.task for r in newly_lost if r.task.job in self.server_jobs])

    def _cut_chief_from(self, tasks: list[Task]) -> None:
        """A host cut off the network drops packets without closing connections, and TensorFlow would wait on
        it forever: close the chief's connections to its tasks, so their calls fail and training moves on."""
        if not tasks:
            return
        chief = self.records["chief:0"]
        if chief.state not in (TaskState.RUNNING, TaskState.STARTING):
            return
        try:
            self.hosts[chief.task.address.host].drop_connections([str(t.address) for t in tasks])
            self.say(f"closed chief:0's connections to {', '.join(t.name for t in tasks)}: training goes on "
                     "without them (a lost ps stops the chief, which is restarted)")
        except HostError as error:
            self.say(f"could not close chief:0's connections to the lost tasks: {error}")

    def _update(self, record: TaskRecord, row: dict) -> None:
        if row["last_line"] != record.last_line:
            record.last_line, record.log_changed_at = row["last_line"], time.monotonic()
        record.pid, record.uptime_s = row["pid"], row["uptime_s"]
        if row["running"]:
            if record.state == TaskState.LOST:
                self.say(f"{record.task.name} is back")
            if record.state in (TaskState.LOST, TaskState.STARTING) and (
                    record.task.job not in self.server_jobs or probe.answers(record.task.address.host,
                                                                        record.task.address.port)):
                record.state = TaskState.RUNNING
        elif record.state in (TaskState.RUNNING, TaskState.STARTING, TaskState.LOST):
            self._exited(record, row["exit_code"])

    def _exited(self, record: TaskRecord, code: int | None) -> None:
        record.exit_code = code
        task = record.task
        if task.job in (*self.trainer_jobs, "evaluator") and code == 0:
            record.state = TaskState.EXITED
            self.say(f"{task.name} finished")
            if record is self.lead:
                self.chief_done_at = time.monotonic()
            return
        what = f"{task.name} exited with code {code}" if code is not None else f"{task.name} died"
        if code == USER_ERROR_EXIT_CODE:
            record.state = TaskState.FAILED
            raise RunFailed(f"{what} (a user error; not restarted): {record.last_line}")
        if record.restarts >= self.policy.max_restarts and task.job == "evaluator":
            record.state = TaskState.FAILED  # a sidecar: training goes on without validation
            self.say(f"{what} after {record.restarts} restarts (launcher.max_restarts); training goes on without "
                     f"it; last log line: {record.last_line}")
            return
        if record.restarts >= self.policy.max_restarts:
            record.state = TaskState.FAILED
            raise RunFailed(f"{what} after {record.restarts} restarts (launcher.max_restarts); last log line: "
                            f"{record.last_line}")
        delay = self.policy.restart_backoff_s * 2 ** record.restarts
        record.state, record.restart_at = TaskState.RESTARTING, time.monotonic() + delay
        record.counts_as_restart = True
        self.say(f"{what}; restarting in {delay:.0f} s (restart {record.restarts + 1} of {self.policy.max_restarts})")
        if task.job == "ps":
            self._hold_chief_for_ps()
        elif task.job in self.trainer_jobs and not self.parameter_server:
            self._restart_group_with(record)

    def _restart_group_with(self, failed: TaskRecord) -> None:
        """Collectives cannot lose a member: stop the other trainers and start them all again together."""
        others = [r for r in self.records.values() if r.task.job in self.trainer_jobs and r is not failed
                  and r.state not in (TaskState.FAILED, TaskState.RESTARTING)]
        if not others:
            return
        for record in others:
            self.hosts[record.task.address.host].stop([record.task])
            record.state, record.restart_at, record.counts_as_restart = TaskState.RESTARTING, failed.restart_at, False
        self.say(f"stopped {', '.join(r.task.name for r in others)}: the whole group restarts with "
                 f"{failed.task.name} and resumes from the last checkpoint")

    def _hold_chief_for_ps(self) -> None:
        """A lost ps takes its variables with it: stop the chief now, start it again once every ps is back."""
        chief = self.records["chief:0"]
        if chief.state in (TaskState.EXITED, TaskState.FAILED):
            return
        if chief.state != TaskState.RESTARTING:
            self.hosts[chief.task.address.host].stop([chief.task])
            self.say("chief:0 stopped until every ps is back; it will resume from its last checkpoint")
        chief.state, chief.restart_at, chief.counts_as_restart = TaskState.RESTARTING, float("inf"), False

    # ----- healing --------------------------------------------------------------------------------------
    def _heal(self) -> None:
        now = time.monotonic()
        chief = self.lead
        if self.parameter_server and chief.restart_at == float("inf") and all(
                r.state == TaskState.RUNNING for r in self.records.values() if r.task.job == "ps"):
            chief.restart_at = now  # every ps is back
        for record in self.records.values():
            if record.state == TaskState.RESTARTING and now >= record.restart_at:
                record.restarts += int(record.counts_as_restart)
                self._start([record])
        self._watch_for_stall(now)

    def _watch_for_stall(self, now: float) -> None:
        lead = self.lead
        silent_s = now - lead.log_changed_at
        name = lead.task.name
        if lead.state == TaskState.LOST and silent_s > self.policy.stall_timeout_s:
            raise RunFailed(f"{name}'s host {lead.task.address.host} has not answered for {silent_s:.0f} s")
        if lead.state == TaskState.RUNNING and silent_s > self.policy.stall_timeout_s:
            self.say(f"stall: {name} logged nothing for {silent_s:.0f} s (launcher.stall_timeout_s); restarting it")
            self.hosts[lead.task.address.host].stop([lead.task])
            self._exited(lead, None)

    def _finished(self) -> bool:
        if self.chief_done_at is None:
            return False
        finishing = [r for r in self.records.values() if r.task.job in (*self.trainer_jobs, "evaluator")]
        waiting = [r for r in finishing if r.state not in (TaskState.EXITED, TaskState.FAILED)]
        grace_s = self.config.evaluation.idle_timeout_s + 60
        if waiting and time.monotonic() - self.chief_done_at > grace_s:
            self.say(f"{', '.join(r.task.name for r in waiting)} still running {grace_s:.0f} s after training "
                     "ended; stopping it")
            return True
        return not waiting

    # ----- stopping -------------------------------------------------------------------------------------
    def stop_everything(self) -> list[str]:
        """Stops every task, evaluator and chief first, on every host that answers; returns one line each."""
        lines = []
        for job in reversed(START_ORDER):
            for name, host in self.hosts.items():
                tasks = [t for t in self.config.tasks((job,)) if t.address.host == name]
                if not tasks:
                    continue
                try:
                    rows = host.stop(tasks)
                except HostError as error:
                    lines += [f"{t.name}: not stopped, {error}" for t in tasks]
                    continue
                for row in rows:
                    record = self.records.get(row["task"])
                    if row["outcome"] in ("stopped", "killed after SIGTERM was ignored"):
                        if record:
                            record.state = TaskState.STOPPED
                        lines.append(f"{row['task']} (pid {row['pid']}): {row['outcome']}")
        return lines + self._remove_firewalls()

    def _remove_firewalls(self) -> list[str]:
        """Deletes this cluster's nftables table wherever one is left (also when the file no longer asks for it)."""
        lines = []
        for name, host in self.hosts.items():
            try:
                if host.firewall_off()["removed"]:
                    lines.append(f"firewall on {name} removed")
            except (HostError, FirewallError) as error:
                if self.config.firewall:
                    lines.append(f"firewall on {name} not removed: {error}")
        return lines

    def fetch_logs(self, wait: bool = False) -> None:
        """Copies remote logs here in the background (or now, with `wait`, at the end of a run)."""
        for name, host in self.hosts.items():
            if not host.is_remote:
                continue
            if wait:
                host.fetch_logs()
            else:
                self.background.take(f"logs {name}", host.fetch_logs)
