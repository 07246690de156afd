"""What each host says of its tasks: asked here at once, or in the background for remote hosts (a slow host never
stalls the supervisor's loop), with a host that stops answering handed to the outages as lost."""

from __future__ import annotations

import time

from launcher.backends.base import AgentFailed, HostUnreachable
from launcher.outages import HOST_SILENT_S
from launcher.records import DONE_STATES, RunFailed, TaskState


def observe(supervisor) -> None:
    """Asks every host with live tasks for their status and hands the answers to `supervisor._apply`."""
    for name, host in supervisor.hosts.items():
        tasks = [r.task for r in supervisor.records.values() if r.host == name and r.state not in DONE_STATES]
        if not tasks:
            continue
        if not host.is_remote:
            supervisor._apply(host.status(tasks), asked_at=time.monotonic())
            continue
        records = [supervisor.records[t.name] for t in tasks]
        key = f"status {name}"
        answer = supervisor.background.take(key, lambda host=host, tasks=tasks: (time.monotonic(), host.status(tasks)))
        if answer is None and supervisor.background.waiting_s(key) > HOST_SILENT_S and any(
                r.state != TaskState.LOST for r in records) and host.reachable() is False:  # slow is not lost
            supervisor.outages.lost(name, records, "")  # a cut-off host does not even refuse: it is silent
        if answer is None:
            continue
        try:
            asked_at, rows = answer.result()
        except HostUnreachable as error:
            supervisor.outages.lost(name, records, str(error).removeprefix(f"{name}: "))
            continue
        except AgentFailed as error:
            raise RunFailed(str(error)) from None
        supervisor.outages.answered(name)
        supervisor._apply(rows, asked_at)
