"""The hosts a cluster runs on: this machine (the agent called in-process) or a remote one (the agent over ssh)."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
from pathlib import Path

from roles import hostctl, remote
from roles.config import PROJECT_ROOT, Address, ClusterConfig, Task

REMOTE_CLUSTER_FILE = ".pscluster/cluster.json"


class HostError(Exception):
    """Something went wrong reaching or running the agent on a host; the message says which host and what."""


class HostUnreachable(HostError):
    """The host did not answer over ssh (down, cut off, or refusing us)."""


class AgentFailed(HostError):
    """The host answered, but the agent there failed (e.g. its python lacks the project's packages)."""


class LocalHost:
    """Tasks on this machine: the agent's functions are called directly."""

    is_remote = False

    def __init__(self, config: ClusterConfig, name: str):
        self.config, self.name = config, name

    def prepare(self, say) -> None:
        """Nothing to copy: the tasks run from this project directory."""

    def start(self, tasks: list[Task]) -> list[dict]:
        return [hostctl.start(self.config, t) for t in tasks]

    def stop(self, tasks: list[Task]) -> list[dict]:
        return [hostctl.stop(self.config, t) for t in tasks]

    def status(self, tasks: list[Task]) -> list[dict]:
        return [hostctl.status(self.config, t) for t in tasks]

    def preflight(self, tasks: list[Task]) -> dict:
        return {"problems": hostctl.preflight(self.config, tasks), "versions": hostctl.versions()}

    def firewall_on(self, tasks: list[Task]) -> dict:
        return hostctl.firewall_on(self.config, tasks)

    def drop_connections(self, peers: list[str]) -> dict:
        return hostctl.drop_connections(peers)

    def firewall_off(self) -> dict:
        return hostctl.firewall_off(self.config)

    def fetch_logs(self) -> None:
        """The logs are already here."""


class SshHost:
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
        command = remote.ssh_command(self.name, self.settings, self.config.launcher, remote_shell)
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
        argv = [self.settings.python, "-m", "roles.hostctl", command, "--cluster", REMOTE_CLUSTER_FILE, *extra]
        if tasks:
            argv += ["--tasks", ",".join(t.name for t in tasks)]
        return json.loads(self._ssh(remote.in_workdir(self.workdir, argv)).strip().splitlines()[-1])

    def prepare(self, say) -> None:
        """Syncs the project and the cluster file to the workdir and bootstraps its .venv if it uses one."""
        launcher = self.config.launcher
        self._ssh(f"mkdir -p {shlex.quote(self.workdir + '/' + os.path.dirname(REMOTE_CLUSTER_FILE))}")
        self._run_local(remote.rsync_push(str(PROJECT_ROOT), self.name, self.settings, launcher, self.workdir),
                        "rsync of the project")
        self._run_local(remote.rsync_file(str(self.config.source), self.name, self.settings, launcher,
                                          f"{self.workdir}/{REMOTE_CLUSTER_FILE}"), "copy of cluster.json")
        if not os.path.isabs(self.settings.python):
            say(f"{self.name}: making sure {self.workdir}/.venv is installed (once per change of pyproject.toml)")
            wheel = [f"PSCLUSTER_TF_PACKAGE={self.settings.tf_package}"] if self.settings.tf_package else []
            self._ssh(remote.in_workdir(self.workdir, ["env", *wheel, "sh", "roles/bootstrap.sh", "run"]),
                      timeout_s=1800)

    def _run_local(self, command: list[str], what: str) -> None:
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            raise HostUnreachable(f"{self.name}: {what} failed: {result.stderr.strip()[-300:]}")

    def start(self, tasks: list[Task]) -> list[dict]:
        return self._agent("start", tasks)

    def stop(self, tasks: list[Task]) -> list[dict]:
        return self._agent("stop", tasks)

    def status(self, tasks: list[Task]) -> list[dict]:
        return self._agent("status", tasks)

    def preflight(self, tasks: list[Task]) -> dict:
        return self._agent("preflight", tasks)

    def firewall_on(self, tasks: list[Task]) -> dict:
        return self._agent("firewall_on", tasks)

    def drop_connections(self, peers: list[str]) -> dict:
        return self._agent("drop_connections", [], "--peers", ",".join(peers))

    def firewall_off(self) -> dict:
        return self._agent("firewall_off", [])

    def fetch_logs(self) -> None:
        """Copies the host's task logs into the launcher's logs directory (kept after the run)."""
        logs = self.config.launcher.logs_dir
        remote_logs = logs if os.path.isabs(logs) else f"{self.workdir}/{logs}"
        local = self.config.path(logs)
        local.mkdir(parents=True, exist_ok=True)
        command = remote.rsync_pull(self.name, self.settings, self.config.launcher, remote_logs, str(local))
        try:
            subprocess.run(command, capture_output=True, stdin=subprocess.DEVNULL,
                           timeout=2 * self.config.launcher.ssh_connect_timeout_s + 20)
        except subprocess.TimeoutExpired:
            pass  # best effort: the logs stay on the host until the next try


def is_this_machine(name: str) -> bool:
    """True for loopback names and for addresses this machine holds (it can bind them)."""
    if Address(name, 1).is_loopback:
        return True
    try:
        family = socket.AF_INET6 if ":" in name else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((name, 0))
        return True
    except OSError:
        return False


def host_for(config: ClusterConfig, name: str):
    """LocalHost for this machine's names and addresses, SshHost for every other host."""
    return LocalHost(config, name) if is_this_machine(name) else SshHost(config, name)
