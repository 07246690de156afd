"""Local task processes: start one in its own session with a pid file and log file, and stop its whole group."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Mapping, Sequence


@dataclasses.dataclass(frozen=True)
class PidRecord:
    """What a pid file holds: enough to tell our process from an unrelated one that reused its pid."""

    pid: int
    start_ticks: int
    command: tuple[str, ...]

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def read(cls, path: Path) -> "PidRecord | None":
        try:
            raw = json.loads(path.read_text())
            return cls(int(raw["pid"]), int(raw["start_ticks"]), tuple(raw["command"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None


def _proc_stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # fields after "pid (comm) "


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None if gone."""
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else None


def has_live_thread(pid: int) -> bool:
    """True while any thread of `pid` runs: a multithreaded process's leader shows as a zombie while the
    other threads are still exiting and still hold its sockets."""
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    for thread in threads:
        try:
            state = thread.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            return True
    return False


def is_running(record: PidRecord) -> bool:
    """True while the process of `record` (not a reused pid) still has a live thread."""
    return start_ticks(record.pid) == record.start_ticks and has_live_thread(record.pid)


def start(command: Sequence[str], *, cwd: Path, env: Mapping[str, str], log_path: Path,
          pid_path: Path) -> tuple[subprocess.Popen, PidRecord]:
    """Starts `command` detached in a new session (its own process group), appending output to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        child = subprocess.Popen(list(command), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    record = PidRecord(child.pid, start_ticks(child.pid) or 0, tuple(command))
    record.write(pid_path)
    return child, record


def _group_alive(pgid: int) -> bool:
    """True while any live (non-zombie) process still belongs to process group `pgid`."""
    for entry in Path("/proc").iterdir():
        fields = _proc_stat(int(entry.name)) if entry.name.isdigit() else None
        if fields and int(fields[2]) == pgid and has_live_thread(int(entry.name)):
            return True
    return False


def stop(record: PidRecord, *, grace_s: float = 10.0) -> str:
    """Stops the process group of `record` (or the process alone when it leads no group, e.g. a launcher run in
    the foreground): SIGTERM, wait up to `grace_s`, then SIGKILL. Returns what happened."""
    fields = _proc_stat(record.pid)
    if not is_running(record) or fields is None:
        return "had already exited"
    if int(fields[2]) == record.pid:  # started with start_new_session: the leader's pid is the group id
        signal_it, alive = functools.partial(os.killpg, record.pid), functools.partial(_group_alive, record.pid)
    else:
        signal_it, alive = functools.partial(os.kill, record.pid), functools.partial(is_running, record)
    signal_it(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not alive():
            return "stopped"
        time.sleep(0.1)
    signal_it(signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    return "killed after SIGTERM was ignored"
