"""The local backend: tasks on this machine, the agent's functions called in-process."""

from __future__ import annotations

import socket

from cluster.config import Address, ClusterConfig, Task
from launcher import agent, host_checks, previous_run
from launcher.backends.base import Backend, FirewallReport, PreflightReport, StopResult, TaskStatus
from launcher.backends.this_disk import ThisDiskOutputs


class LocalHost(ThisDiskOutputs, Backend):
    """Tasks on this machine, run from this project directory."""

    is_remote = False

    def __init__(self, config: ClusterConfig, name: str):
        self.config, self.name = config, name

    def start(self, tasks: list[Task]) -> list[TaskStatus]:
        return [agent.start(self.config, t, fork=True) for t in tasks]

    def stop(self, tasks: list[Task], quick: bool = False) -> list[StopResult]:
        return [agent.stop(self.config, t, quick=quick) for t in tasks]

    def status(self, tasks: list[Task]) -> list[TaskStatus]:
        return [agent.status(self.config, t) for t in tasks]

    def preflight(self, tasks: list[Task]) -> PreflightReport:
        return host_checks.preflight_report(self.config, tasks)

    def set_aside_previous_run(self) -> str | None:
        return previous_run.set_aside(self.config)

    def firewall_on(self, tasks: list[Task]) -> FirewallReport:
        return agent.firewall_on(self.config, tasks)

    def firewall_off(self) -> bool:
        return agent.firewall_off(self.config)

    def drop_connections(self, peers: list[str]) -> int:
        return agent.drop_connections(peers)


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
