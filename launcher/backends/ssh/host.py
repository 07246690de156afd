"""The ssh backend: the project's code synced to a host's workdir, the agent run there over ssh."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import uuid
from pathlib import Path

from cluster import user_model
from cluster.config import PROJECT_ROOT, ClusterConfig, Task
from cluster.run_files import this_run
from cluster.taskspec import task_command
from common import net
from launcher.backends.ssh import commands as ssh_commands
from launcher.backends.ssh.session import AgentSession
from launcher.backends.base import (AgentFailed, Backend, BootstrapFailed, FirewallReport, HostUnreachable,
                                    PreflightReport, RunOutputs, StopResult, TaskStatus)

REMOTE_CLUSTER_FILE = ".pscluster/cluster.json"
BOOTSTRAP_ERROR = "[bootstrap] error: "
LOGS_MARK = ".launcher-mark"  # in the launcher's logs_dir: a host that reads the same token shares the directory
LAUNCHER_TOKEN = uuid.uuid4().hex


class SshHost(Backend):
    """Tasks on another machine: the project is synced to its workdir and the agent runs there over ssh."""

    is_remote = True

    def __init__(self, config: ClusterConfig, name: str):
        self.config, self.name = config, name
        self.settings = config.host(name)
        self.workdir = self.settings.workdir or str(PROJECT_ROOT)
        self.shares_logs_dir = False  # known after prepare
        Path("~/.ssh").expanduser().mkdir(mode=0o700, exist_ok=True)  # for the shared connection's socket
        self.session = self._status_session()

    def _status_session(self) -> AgentSession:
        """The agent kept running on the host for the launcher's looks at its tasks."""
        argv = [self.settings.python, "-m", "launcher.agent", "status_lines", "--cluster", REMOTE_CLUSTER_FILE]
        return AgentSession(self.name, self._ssh_command(ssh_commands.in_workdir(self.workdir, argv)),
                            timeout_s=self._quick_timeout_s())

    def _quick_timeout_s(self) -> float:
        """How long a quick call may take: twice ssh's connect timeout and 20 s, so a cut-off host cannot stall."""
        return 2 * self.config.launcher.ssh_connect_timeout_s + 20

    def _ssh_command(self, remote_shell: str) -> list[str]:
        return ssh_commands.ssh_command(self.name, self.settings, self.config.launcher, remote_shell)

    def _call(self, remote_shell: str, timeout_s: float | None = None) -> subprocess.CompletedProcess:
        """Runs one remote shell string; a quick timeout by default, so a cut-off host cannot stall the launcher."""
        timeout_s = timeout_s or self._quick_timeout_s()
        command = self._ssh_command(remote_shell)
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                                    stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise HostUnreachable(f"{self.name}: no answer over ssh within {timeout_s:.0f} s") from None
        if result.returncode == 255:
            reason = (result.stderr.strip().splitlines() or ["ssh failed"])[-1]
            raise HostUnreachable(f"{self.name}: {reason}")
        return result

    def _ssh(self, remote_shell: str, timeout_s: float | None = None) -> str:
        result = self._call(remote_shell, timeout_s)
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise AgentFailed(f"{self.name}: `{remote_shell}` failed with exit code {result.returncode}: {last}")
        return result.stdout

    def _agent(self, command: str, tasks: list[Task], *extra: str, timeout_s: float | None = None):
        argv = [self.settings.python, "-m", "launcher.agent", command, "--cluster", REMOTE_CLUSTER_FILE, *extra]
        if tasks:
            argv += ["--tasks", ",".join(t.name for t in tasks)]
        return json.loads(self._ssh(ssh_commands.in_workdir(self.workdir, argv), timeout_s).strip().splitlines()[-1])

    def prepare(self, say) -> None:
        """Syncs the code and the cluster file to the workdir (nothing else there is touched), bootstraps its
        .venv if `python` is relative, and sets the last run's task logs aside."""
        launcher = self.config.launcher
        self._ssh(f"mkdir -p {shlex.quote(self.workdir + '/' + os.path.dirname(REMOTE_CLUSTER_FILE))}")
        user_code = ssh_commands.user_code(PROJECT_ROOT, self.config.training.model, self.config.training.dataset)
        self._run_local(ssh_commands.rsync_push(str(PROJECT_ROOT), self.name, self.settings, launcher, self.workdir,
                                                user_code), "rsync of the project's code")
        self._run_local(ssh_commands.rsync_file(str(self.config.source), self.name, self.settings, launcher,
                                                f"{self.workdir}/{REMOTE_CLUSTER_FILE}"), "copy of cluster.json")
        if not os.path.isabs(self.settings.python):
            say(f"{self.name}: making sure {self.workdir}/.venv is installed (once per change of pyproject.toml)")
            self._bootstrap()
        self._agent("new_run", self._tasks_here())
        self.shares_logs_dir = self._reads_launcher_mark()

    def _tasks_here(self) -> list[Task]:
        return [t for t in self.config.tasks() if t.address.host == self.name]

    def _reads_launcher_mark(self) -> bool:
        """Whether this host's logs_dir is the launcher's own (one filesystem, e.g. NFS): then its logs are here
        already, and copying them over themselves would replace files the tasks and the launcher still write."""
        local = self.config.path(self.config.launcher.logs_dir)
        local.mkdir(parents=True, exist_ok=True)
        (local / LOGS_MARK).write_text(LAUNCHER_TOKEN)
        remote = f"{self.remote_path(self.config.launcher.logs_dir).rstrip('/')}/{LOGS_MARK}"
        return LAUNCHER_TOKEN in self._ssh(f"cat {shlex.quote(remote)} 2>/dev/null || true").split()

    def take_new_config(self, config: ClusterConfig) -> None:
        self.config = config
        self.session.close()  # the next look starts one with the new file's launcher settings (ssh options)
        self.session = self._status_session()
        self._run_local(ssh_commands.rsync_file(str(config.source), self.name, self.settings, config.launcher,
                                                f"{self.workdir}/{REMOTE_CLUSTER_FILE}"), "copy of cluster.json")

    def _bootstrap(self) -> None:
        wheel = [f"PSCLUSTER_TF_PACKAGE={self.settings.tf_package}"] if self.settings.tf_package else []
        result = self._call(ssh_commands.in_workdir(self.workdir, ["env", *wheel, "sh", "roles/bootstrap.sh", "run"]),
                            timeout_s=1800)
        if result.returncode == 0:
            return
        lines = result.stderr.strip().splitlines()
        errors = [line[len(BOOTSTRAP_ERROR):] for line in lines if line.startswith(BOOTSTRAP_ERROR)]
        cause = "; ".join(errors) or (lines or ["no output"])[-1]
        raise BootstrapFailed(f"{self.name}: building {self.workdir}/.venv failed: "
                              f"{cause.replace('this host', self.name)}; or set hosts.{self.name}.python to the "
                              "absolute path of a Python 3.11 that has the project's packages")

    def _run_local(self, command: list[str], what: str) -> None:
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        if result.returncode in (12, 255):  # rsync's codes for "the ssh under it failed"
            raise HostUnreachable(f"{self.name}: {what} failed: {result.stderr.strip()[-300:]}")
        if result.returncode != 0:
            raise AgentFailed(f"{self.name}: {what} failed: {result.stderr.strip()[-300:]}")

    def start(self, tasks: list[Task]) -> list[TaskStatus]:
        members = self.config.trainer_workers
        extra = ("--workers", ",".join(map(str, members))) if members is not None else ()
        run = ("--run", this_run()) if this_run() else ()
        return [TaskStatus.from_json(row) for row in self._agent("start", tasks, *extra, *run)]

    def stop(self, tasks: list[Task], quick: bool = False) -> list[StopResult]:
        return [StopResult.from_json(row) for row in self._agent("stop", tasks, *(["--quick"] if quick else []))]

    def status(self, tasks: list[Task]) -> list[TaskStatus]:
        answer = json.loads(self.session.ask(",".join(t.name for t in tasks)))
        if isinstance(answer, dict):
            raise AgentFailed(f"{self.name}: the agent's status failed: {answer['error']}")
        return [TaskStatus.from_json(row) for row in answer]

    def close(self) -> None:
        self.session.close()

    def preflight(self, tasks: list[Task]) -> PreflightReport:
        slow = user_model.CHECK_TIMEOUT_S + self._quick_timeout_s()  # a user model
        return PreflightReport.from_json(self._agent("preflight", tasks, timeout_s=slow))

    def set_aside_previous_run(self) -> str | None:
        return self._agent("set_aside_previous_run", [])

    def firewall_on(self, tasks: list[Task]) -> FirewallReport:
        return FirewallReport.from_json(self._agent("firewall_on", tasks))

    def drop_connections(self, peers: list[str]) -> int:
        return self._agent("drop_connections", [], "--peers", ",".join(peers))

    def firewall_off(self) -> bool:
        return self._agent("firewall_off", [])

    def reachable(self) -> bool:
        """True when the host's sshd accepts a TCP connection: a loaded host answers late but still connects."""
        return net.answers(self.name, self.settings.ssh_port, timeout_s=1.5)

    def run_outputs(self) -> RunOutputs:
        return RunOutputs.from_json(self._agent("outputs", []))

    def remote_path(self, path: str) -> str:
        """A path from cluster.json as this host resolves it (relative ones start at its workdir)."""
        return path if os.path.isabs(path) else f"{self.workdir.rstrip('/')}/{path}"

    def _pull(self, remote_dir: str, local: Path, patterns: tuple[str, ...]) -> None:
        local.mkdir(parents=True, exist_ok=True)
        command = ssh_commands.rsync_pull(self.name, self.settings, self.config.launcher, remote_dir, str(local),
                                          patterns)
        try:
            subprocess.run(command, capture_output=True, stdin=subprocess.DEVNULL,
                           timeout=self._quick_timeout_s())
        except subprocess.TimeoutExpired:
            pass  # best effort: the files stay on the host until the next try

    def fetch_logs(self) -> None:
        """Copies the log and exit files of this host's tasks into the launcher's logs directory (kept after the
        run); nothing when the host shares that directory."""
        if self.shares_logs_dir:
            return
        logs = self.config.launcher.logs_dir
        own = tuple(f"{t.job}-{t.index}.{suffix}" for t in self._tasks_here() for suffix in ("log", "exit"))
        if own:
            self._pull(self.remote_path(logs), self.config.path(logs), own)

    def fetch_tensorboard(self, local_dir: str) -> str:
        """Copies the lead's train and validation events from this host to `local_dir`; returns `local_dir`."""
        remote = self.remote_path(self.config.training.output_dir) + "/tensorboard"
        self._pull(remote, Path(local_dir), ("train/", "validation/"))
        return local_dir


def command_as_run(config: ClusterConfig, task: Task, remote: bool) -> tuple[str, list[str]]:
    """Where a task's command runs and its argv there: a remote host's workdir and its own copy of cluster.json."""
    command = task_command(config, task)
    if not remote:
        return str(PROJECT_ROOT), command
    workdir = config.host(task.address.host).workdir or str(PROJECT_ROOT)
    return workdir, [*command[:-1], f"{workdir.rstrip('/')}/{REMOTE_CLUSTER_FILE}"]
