"""The per-place agent: starts, stops and reports this host's tasks; the launcher calls it in-process or over ssh.

Each task runs in its own session (its pid is its process group), with three files in the logs directory:
`<job>-<index>.log`, `.pid` (pid, start time and group, to never signal a reused pid) and `.exit` (the exit
code the task writes itself as it ends; none when it was killed). A task whose pid file is gone (the logs
folder deleted) is found by the exit file its environment names (launcher/process_search.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from cluster import config as cluster_config
from cluster import taskspec
from cluster.config import PROJECT_ROOT, ClusterConfig, Task
from cluster.run_files import RUN_VARIABLE, Phase, RunFiles, TrainingProgress, read_progress
from common.exit_file import EXIT_FILE_VARIABLE
from launcher import agent_cli, firewall, previous_run, process, process_search, run_outputs
from launcher.host_checks import preflight_report, task_file
from launcher.log_rotation import rotate_if_large
from launcher.backends.base import FirewallReport, StopOutcome, StopResult, TaskStatus, as_json
from launcher.process import PidRecord


TF_NOISE = re.compile(r"oneDNN custom operations|TF_ENABLE_ONEDNN_OPTS|cpu_feature_guard|This TensorFlow binary "
                      r"is optimized|rebuild TensorFlow with|Unable to register cu(DNN|FFT|BLAS) factory|"
                      r"computation_placer|absl::InitializeLog|cuda_(executor|driver|blas|fft|dnn)")


def last_line(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, path.stat().st_size - 4096))
            lines = handle.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    ours = [line for line in lines if not TF_NOISE.search(line)]  # TensorFlow's start-up notices say nothing
    return (ours or lines or [""])[-1]


def read_exit_code(config: ClusterConfig, task: Task) -> int | None:
    try:
        return int(task_file(config, task, "exit").read_text().strip())
    except (OSError, ValueError):
        return None


def start(config: ClusterConfig, task: Task, fork: bool = False) -> TaskStatus:
    """Starts `task` detached unless it already runs, forked from a process that imported TensorFlow when `fork`
    allows (launcher/task_forks.py); returns its status."""
    record = live_record(config, task)
    if record and process.group_alive(record):
        return status(config, task)
    exit_file = task_file(config, task, "exit")
    exit_file.unlink(missing_ok=True)
    env = {**taskspec.task_environment(config, task, os.environ), EXIT_FILE_VARIABLE: str(exit_file)}
    command, files = taskspec.task_command(config, task), {"log_path": task_file(config, task, "log"),
                                                             "pid_path": task_file(config, task, "pid")}
    from launcher import task_forks  # a start's alone: every status look runs the agent, and pays its imports

    if not (fork and task_forks.start(command, cwd=PROJECT_ROOT, env=env, **files)):
        process.start(command, cwd=PROJECT_ROOT, env=env, **files)
    return status(config, task)


def status(config: ClusterConfig, task: Task) -> TaskStatus:
    """Its pid, whether it runs, its exit code once it ended, uptime and last log line; for the lead, its optimizer
    step while it trains and whether its last heartbeat said it waits for data; a log grown past
    launcher.log_max_mb is rotated here, on the task's own host."""
    settings = config.launcher
    rotate_if_large(task_file(config, task, "log"), max_mb=settings.log_max_mb, files_kept=settings.log_files_kept)
    record = live_record(config, task)
    running = bool(record and process.is_running(record))
    uptime = _uptime_s(config, task) if running else 0.0
    beat = heartbeat(config, task, record.pid) if record else None
    return TaskStatus(task=task.name, pid=record.pid if record else None, running=running,
                      exit_code=None if running else read_exit_code(config, task), uptime_s=round(uptime, 1),
                      last_line=last_line(task_file(config, task, "log")),
                      step=beat.step if running and beat and beat.phase == Phase.TRAIN else None,
                      waiting=bool(beat and beat.phase == Phase.WAIT))


def heartbeat(config: ClusterConfig, task: Task, pid: int) -> TrainingProgress | None:
    """The lead's last heartbeat, when this very process wrote it (not a predecessor's file)."""
    if task != config.lead:
        return None
    progress = read_progress(RunFiles(config.path(config.training.output_dir)))
    return progress if progress and progress.pid == pid else None


def stop(config: ClusterConfig, task: Task, quick: bool = False) -> StopResult:
    """Stops every process of the task's group (SIGTERM, then SIGKILL) and removes its pid file; the lead gets
    launcher.stop_grace_s to write its checkpoint first, unless `quick`."""
    records = task_records(config, task)
    grace_s = config.launcher.stop_grace_s if task == config.lead and not quick else 10.0
    outcomes = [process.stop(record, grace_s=grace_s) for record in records]
    task_file(config, task, "pid").unlink(missing_ok=True)
    stopped = next((i for i, outcome in enumerate(outcomes) if outcome.was_running), 0)
    return StopResult(task=task.name, pid=records[stopped].pid if records else None,
                      outcome=outcomes[stopped] if records else StopOutcome.NOT_STARTED)


def task_records(config: ClusterConfig, task: Task) -> list[PidRecord]:
    """The task's pid file record (if any), then every other live process group started for it, found by the exit
    file in its environment: after the logs folder was deleted, or beside a pid file of an older start."""
    record = process.PidRecord.read(task_file(config, task, "pid"))
    found = process_search.task_groups(task_file(config, task, "exit"))
    return [*([record] if record else []), *(r for r in found if not record or r.group != record.group)]


def live_record(config: ClusterConfig, task: Task) -> PidRecord | None:
    """The task's pid file record while its group lives; else a live group found by its exit file (the logs folder
    was deleted under it); else the pid file's record of a task that ended, or None."""
    record = process.PidRecord.read(task_file(config, task, "pid"))
    if record and process.group_alive(record):
        return record
    return next(iter(process_search.task_groups(task_file(config, task, "exit"))), record)


def _uptime_s(config: ClusterConfig, task: Task) -> float:
    try:
        return time.time() - task_file(config, task, "pid").stat().st_mtime
    except OSError:  # found without its pid file
        return 0.0


def firewall_on(config: ClusterConfig, tasks: list[Task]) -> FirewallReport:
    """Lets only cluster members (and the launcher, when it came over ssh) reach these tasks' ports."""
    listening = [t for t in tasks if t.job != "evaluator"]
    launcher = os.environ.get("SSH_CLIENT", "").split()[:1]
    return FirewallReport(table=firewall.apply(config, listening, launcher),
                          ports=[t.address.port for t in listening])


def firewall_off(config: ClusterConfig) -> bool:
    return firewall.remove(config)


def drop_connections(peers: list[str]) -> int:
    """Destroys this host's TCP connections to `host:port` peers (`ss -K`), so calls to a peer that vanished
    without closing them fail at once instead of waiting on a silent network."""
    dropped = 0
    for peer in peers:
        host, port = peer.rsplit(":", 1)
        for ip in {info[4][0] for info in socket.getaddrinfo(host.strip("[]"), None, proto=socket.IPPROTO_TCP)}:
            result = subprocess.run(["ss", "-K", "-H", "dst", ip, "dport", "=", f":{port}"], capture_output=True,
                                    text=True, timeout=30)
            dropped += len(result.stdout.strip().splitlines())
    return dropped


class HostControl:
    """What the launcher asks of one host; every command prints one line of JSON on stdout (status_lines: one
    for each line asked)."""

    def _tasks(self, cluster: str, tasks: str):
        config = cluster_config.load(cluster)
        names = tasks.split(",") if isinstance(tasks, str) else list(tasks)
        return config, [config.task(*_split(name)) for name in names]

    def start(self, cluster: str, tasks: str, workers: str = "", run: str = ""):
        """`workers`: the indices the chief trains with (`0,2`), when the launcher left lost workers out; `run`:
        the launcher run the tasks belong to (PSCLUSTER_RUN, which the lead stamps on summaries)."""
        if run:
            os.environ[RUN_VARIABLE] = str(run)
        config, selected = self._tasks(cluster, tasks)
        if workers != "":
            listed = workers if isinstance(workers, (tuple, list)) else str(workers).split(",")
            config = dataclasses.replace(config, trainer_workers=tuple(int(i) for i in listed))
        _print([as_json(start(config, t)) for t in selected])

    def stop(self, cluster: str, tasks: str, quick: bool = False):
        config, selected = self._tasks(cluster, tasks)
        _print([as_json(stop(config, t, quick=quick)) for t in selected])

    def status(self, cluster: str, tasks: str):
        config, selected = self._tasks(cluster, tasks)
        _print([as_json(status(config, t)) for t in selected])

    def status_lines(self, cluster: str):
        """Answers each line of task names on stdin (`ps:0,worker:1`) with their status, one line of JSON each, until
        stdin ends: the launcher keeps one such agent per ssh host for its looks (launcher/backends/ssh/session.py)."""
        for line in sys.stdin:
            try:
                self.status(cluster, line.strip())
            except Exception as error:  # noqa: BLE001  the launcher ends the run on it, as on a failed status
                _print({"error": f"{type(error).__name__}: {error}"})
            sys.stdout.flush()

    def firewall_on(self, cluster: str, tasks: str):
        config, selected = self._tasks(cluster, tasks)
        _print(as_json(firewall_on(config, selected)))

    def firewall_off(self, cluster: str, tasks: str = ""):
        _print(firewall_off(cluster_config.load(cluster)))

    def drop_connections(self, cluster: str, peers: str, tasks: str = ""):
        _print(drop_connections([peer for peer in peers.split(",") if peer]))

    def new_run(self, cluster: str, tasks: str):
        config, selected = self._tasks(cluster, tasks)
        _print(run_outputs.archive_logs(config, selected))

    def outputs(self, cluster: str, tasks: str = ""):
        _print(as_json(run_outputs.read(cluster_config.load(cluster))))

    def set_aside_previous_run(self, cluster: str, tasks: str = ""):
        _print(previous_run.set_aside(cluster_config.load(cluster)))

    def preflight(self, cluster: str, tasks: str):
        config, selected = self._tasks(cluster, tasks)
        _print(as_json(preflight_report(config, selected)))


def _print(document) -> None:
    print(json.dumps(document))


def _split(name: str) -> tuple[str, int]:
    job, index = name.split(":")
    return job, int(index)


if __name__ == "__main__":
    agent_cli.call(HostControl(), sys.argv[1:])
