"""The ssh backend: the project synced to a host's workdir, the agent run there over ssh."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

from cluster.config import PROJECT_ROOT, ClusterConfig, Task
from launcher import ssh_commands
from launcher.backends.base import (AgentFailed, Backend, FirewallReport, HostUnreachable, PreflightReport,
                                    StopResult, TaskStatus)

REMOTE_CLUSTER_FILE = ".pscluster/cluster.json"


class SshHost(Backend):
    """Tasks on another machine: the project is synced to its workdir and the agent runs there over ssh."""

    is_remote = True

    def __init__(self, config: ClusterConfig, name: str):
        self.config, self.name = config, name
        self.settings = config.host(name)
        self.workdir = self.settings.workdir or str(PROJECT_ROOT)
        Path("~/.ssh").expanduser().mkdir(mode=0o700, exist_ok=True)  # for the shared connection's socket

    def _ssh(self, remote_shell: str, timeout_s: float | None = None) -> str:
        """Runs one remote shell string; a quick timeout by default, so a cut-off host cannot stall the launcher."""
        timeout_s = timeout_s or 2 * self.config.launcher.ssh_connect_timeout_s + 20
        command = ssh_commands.ssh_command(self.name, self.settings, self.config.launcher, remote_shell)
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                                    stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise HostUnreachable(f"{self.name}: no answer over ssh within {timeout_s:.0f} s") from None
        if result.returncode == 255:
            reason = (result.stderr.strip().splitlines() or ["ssh failed"])[-1]
            raise HostUnreachable(f"{self.name}: {reason}")
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise AgentFailed(f"{self.name}: `{remote_shell}` failed with exit code {result.returncode}: {last}")
        return result.stdout

    def _agent(self, command: str, tasks: list[Task], *extra: str):
        argv = [self.settings.python, "-m", "launcher.agent", command, "--cluster", REMOTE_CLUSTER_FILE, *extra]
        if tasks:
            argv += ["--tasks", ",".join(t.name for t in tasks)]
        return json.loads(self._ssh(ssh_commands.in_workdir(self.workdir, argv)).strip().splitlines()[-1])

    def prepare(self, say) -> None:
        """Syncs the project and the cluster file to the workdir and bootstraps its .venv if it uses one."""
        launcher = self.config.launcher
        self._ssh(f"mkdir -p {shlex.quote(self.workdir + '/' + os.path.dirname(REMOTE_CLUSTER_FILE))}")
        self._run_local(ssh_commands.rsync_push(str(PROJECT_ROOT), self.name, self.settings, launcher, self.workdir),
                        "rsync of the project")
        self._run_local(ssh_commands.rsync_file(str(self.config.source), self.name, self.settings, launcher,
                                          f"{self.workdir}/{REMOTE_CLUSTER_FILE}"), "copy of cluster.json")
        if not os.path.isabs(self.settings.python):
            say(f"{self.name}: making sure {self.workdir}/.venv is installed (once per change of pyproject.toml)")
            wheel = [f"PSCLUSTER_TF_PACKAGE={self.settings.tf_package}"] if self.settings.tf_package else []
            self._ssh(ssh_commands.in_workdir(self.workdir, ["env", *wheel, "sh", "roles/bootstrap.sh", "run"]),
                      timeout_s=1800)

    def _run_local(self, command: list[str], what: str) -> None:
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            raise HostUnreachable(f"{self.name}: {what} failed: {result.stderr.strip()[-300:]}")

    def start(self, tasks: list[Task]) -> list[TaskStatus]:
        return [TaskStatus.from_json(row) for row in self._agent("start", tasks)]

    def stop(self, tasks: list[Task]) -> list[StopResult]:
        return [StopResult.from_json(row) for row in self._agent("stop", tasks)]

    def status(self, tasks: list[Task]) -> list[TaskStatus]:
        return [TaskStatus.from_json(row) for row in self._agent("status", tasks)]

    def preflight(self, tasks: list[Task]) -> PreflightReport:
        return PreflightReport.from_json(self._agent("preflight", tasks))

    def set_aside_previous_run(self) -> str | None:
        return self._agent("set_aside_previous_run", [])

    def firewall_on(self, tasks: list[Task]) -> FirewallReport:
        return FirewallReport.from_json(self._agent("firewall_on", tasks))

    def drop_connections(self, peers: list[str]) -> int:
        return self._agent("drop_connections", [], "--peers", ",".join(peers))

    def firewall_off(self) -> bool:
        return self._agent("firewall_off", [])

    def fetch_logs(self) -> None:
        """Copies the host's task logs into the launcher's logs directory (kept after the run)."""
        logs = self.config.launcher.logs_dir
        remote_logs = logs if os.path.isabs(logs) else f"{self.workdir}/{logs}"
        local = self.config.path(logs)
        local.mkdir(parents=True, exist_ok=True)
        command = ssh_commands.rsync_pull(self.name, self.settings, self.config.launcher, remote_logs, str(local))
        try:
            subprocess.run(command, capture_output=True, stdin=subprocess.DEVNULL,
                           timeout=2 * self.config.launcher.ssh_connect_timeout_s + 20)
        except subprocess.TimeoutExpired:
            pass  # best effort: the logs stay on the host until the next try
