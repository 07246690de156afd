"""The end of a run: every task stopped (evaluator and chief first) on every host that answers, then the firewalls."""

from __future__ import annotations

from cluster.config import ClusterConfig, Task
from launcher.backends.base import Backend, HostError
from launcher.firewall import FirewallError
from launcher.records import TaskRecord, TaskState

STOP_ORDER = ("evaluator", "chief", "worker", "ps")  # the lead lets go of the servers before they go


def stop_everything(config: ClusterConfig, hosts: dict[str, Backend], records: dict[str, TaskRecord]) -> list[str]:
    """Stops every task the file lists, whether or not this launcher started it; returns one line per task that was
    running (its record, if any, becomes STOPPED), one per host that could not be asked, one per firewall removed."""
    lines = []
    for job in STOP_ORDER:
        for name, host in hosts.items():
            tasks = [t for t in config.tasks((job,)) if t.address.host == name]
            if tasks:
                lines += _stop_on(host, tasks, records)
    return lines + remove_firewalls(config, hosts)


def _stop_on(host: Backend, tasks: list[Task], records: dict[str, TaskRecord]) -> list[str]:
    try:
        results = host.stop(tasks)
    except HostError as error:
        return [f"{t.name}: not stopped, {error}" for t in tasks]
    lines = []
    for result in results:
        if result.outcome.was_running:
            if result.task in records:
                records[result.task].state = TaskState.STOPPED
            lines.append(f"{result.task} (pid {result.pid}): {result.outcome.value}")
    return lines


def remove_firewalls(config: ClusterConfig, hosts: dict[str, Backend]) -> list[str]:
    """Deletes this cluster's nftables table wherever one is left (also when the file no longer asks for it)."""
    lines = []
    for name, host in hosts.items():
        try:
            if host.firewall_off():
                lines.append(f"firewall on {name} removed")
        except (HostError, FirewallError) as error:
            if config.firewall:
                lines.append(f"firewall on {name} not removed: {error}")
    return lines
