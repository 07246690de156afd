"""Local task processes: start one in its own session with a pid file and log file, and stop its whole group."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Mapping, Sequence

from common.proc import has_live_thread, proc_stat, start_ticks
from launcher.backends.base import StopOutcome


@dataclasses.dataclass(frozen=True)
class PidRecord:
    """What a pid file holds: enough to tell our process from an unrelated one that reused its pid."""

    pid: int
    start_ticks: int
    command: tuple[str, ...]
    group: int | None = None  # the process group (and session) it leads, when started by `start`

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def read(cls, path: Path) -> "PidRecord | None":
        try:
            raw = json.loads(path.read_text())
            group = raw.get("group")
            return cls(int(raw["pid"]), int(raw["start_ticks"]), tuple(raw["command"]),
                       None if group is None else int(group))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None


def is_running(record: PidRecord) -> bool:
    """True while the process of `record` (not a reused pid) still has a live thread."""
    return start_ticks(record.pid) == record.start_ticks and has_live_thread(record.pid)


def start(command: Sequence[str], *, cwd: Path, env: Mapping[str, str], log_path: Path,
          pid_path: Path) -> tuple[subprocess.Popen, PidRecord]:
    """Starts `command` detached in a new session (its own process group), appending output to `log_path`.

    The pid file records the process itself (no wrapper), so the pid people see is the one to signal.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        child = subprocess.Popen(list(command), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    record = PidRecord(child.pid, start_ticks(child.pid) or 0, tuple(command), group=child.pid)
    record.write(pid_path)
    return child, record


def _group_alive(pgid: int) -> bool:
    """True while any live (non-zombie) process still belongs to process group `pgid`. Asked of every task at each
    poll: a group with no process at all, or whose leader lives, is told without reading all of /proc."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False  # no process of the group is left, not even a zombie
    except PermissionError:
        pass  # another user's process holds the group: /proc tells whether it lives
    leader = proc_stat(pgid)
    if leader and int(leader[2]) == pgid and has_live_thread(pgid):
        return True
    return any_live_member(pgid)


def any_live_member(pgid: int) -> bool:
    """Whether /proc lists a live process of group `pgid`: a read of every process's stat (4 ms with 67 processes,
    30 ms with 367, on a 2-core machine: bench/workload/watch.py)."""
    for entry in Path("/proc").iterdir():
        fields = proc_stat(int(entry.name)) if entry.name.isdigit() else None
        if fields and int(fields[2]) == pgid and has_live_thread(int(entry.name)):
            return True
    return False


def group_alive(record: PidRecord) -> bool:
    """True while a process of the group `record` leads is alive, even after the leader itself is gone;
    False when the leader's pid now belongs to another process (the group id was reused)."""
    if record.group is None:
        return is_running(record)
    if start_ticks(record.pid) not in (None, record.start_ticks):
        return False
    return _group_alive(record.group)


def stop(record: PidRecord, *, grace_s: float = 10.0) -> StopOutcome:
    """Stops the process group `record` leads (every process of it, even when the leader already died), or the
    process alone when it leads none (a launcher run in the foreground): SIGTERM, wait up to `grace_s`, then
    SIGKILL."""
    if not group_alive(record):
        return StopOutcome.ALREADY_EXITED
    if record.group is not None:
        signal_it, alive = functools.partial(os.killpg, record.group), functools.partial(group_alive, record)
    else:
        signal_it, alive = functools.partial(os.kill, record.pid), functools.partial(is_running, record)
    if _signal_until_gone(signal_it, alive, signal.SIGTERM, grace_s):
        return StopOutcome.STOPPED
    _signal_until_gone(signal_it, alive, signal.SIGKILL, 5.0)
    return StopOutcome.KILLED


def _signal_until_gone(signal_it, alive, signum: int, timeout_s: float) -> bool:
    with contextlib.suppress(ProcessLookupError):
        signal_it(signum)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive():
            return True
        time.sleep(0.1)
    return not alive()
