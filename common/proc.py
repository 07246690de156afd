"""Processes as /proc shows them: start time, and whether any thread still lives (a zombie leader does not count)."""

from __future__ import annotations

from pathlib import Path


def proc_stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # fields after "pid (comm) "


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None if gone."""
    fields = proc_stat(pid)
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
