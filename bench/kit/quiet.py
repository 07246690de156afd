"""Benchmarks run alone: which processes outside this one's own tree use CPU right now (sampled from /proc)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

SAMPLE_S = 2.0
BUSY_SHARE = 0.05  # of one core, over the sample


def _ticks() -> dict[int, tuple[int, str]]:
    """CPU ticks (user + system) and command of every process."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        found[int(entry.name)] = (int(fields[11]) + int(fields[12]), command or stat.split("(", 1)[1].split(")")[0])
    return found


def _own_tree() -> set[int]:
    """This process, its ancestors (the shell that started it) and its descendants."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    mine, pid = {os.getpid()}, os.getpid()
    while pid in parents and parents[pid] > 1:
        pid = parents[pid]
        mine.add(pid)
    grown = True
    while grown:
        children = {child for child, parent in parents.items() if parent in mine} - mine
        mine |= children
        grown = bool(children)
    return mine


def busy_processes(sample_s: float = SAMPLE_S) -> list[str]:
    """`pid (share of a core): command` for each process outside our own tree that used CPU over the sample."""
    before = _ticks()
    time.sleep(sample_s)
    after, mine, hertz = _ticks(), _own_tree(), os.sysconf("SC_CLK_TCK")
    busy = []
    for pid, (ticks, command) in after.items():
        used = (ticks - before.get(pid, (ticks, ""))[0]) / hertz / sample_s
        if pid not in mine and used > BUSY_SHARE:
            busy.append(f"{pid} ({used:.0%}): {command[:80]}")
    return busy


def wait_for_quiet(limit_s: float = 60.0) -> list[str]:
    """Samples until no other process uses CPU, for at most `limit_s`; returns what was still busy (empty: quiet)."""
    deadline = time.monotonic() + limit_s
    busy = busy_processes()
    while busy and time.monotonic() < deadline:
        print(f"[bench] waiting for other processes to stop using CPU: {busy}", file=sys.stderr, flush=True)
        busy = busy_processes(5.0)
    return busy


def require_quiet() -> None:
    """Exits with the busy processes named when the machine is not quiet: a benchmark runs alone."""
    busy = wait_for_quiet()
    if busy:
        sys.exit(f"other processes use CPU; run the benchmark alone: {busy}")
