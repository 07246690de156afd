"""`python -m bench.workload.watch`: what the launcher's look at one task costs on a host running many processes.

At each poll (launcher.poll_s) the launcher asks whether each task's process group lives. Until 2026-12-07 every
answer read the stat of every process in /proc (`launcher.process.any_live_member`); now a group whose leader lives,
or that has no process left, is told from the leader alone (`launcher.process.group_alive`). This times both with
`extra` sleeping processes beside, and writes bench/RESULTS-watch.md (machine, date, load average; notes kept).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import fire

from bench.__main__ import machine, write_keeping_notes
from common.proc import start_ticks
from launcher import process

HERE = Path(__file__).resolve().parent.parent


def cpu_ms(check, repeats: int) -> float:
    """The CPU-milliseconds one call of `check` takes, averaged over `repeats`."""
    started = time.process_time()
    for _ in range(repeats):
        assert check()
    return (time.process_time() - started) / repeats * 1000


def measure(extra: int, repeats: int) -> dict:
    """Both checks of one live group with `extra` sleeping processes beside it (started, then stopped here)."""
    beside = [subprocess.Popen(["sleep", "600"]) for _ in range(extra)]
    leader = subprocess.Popen(["sleep", "600"], start_new_session=True)  # the newest pid: a scan finds it last
    try:
        record = process.PidRecord(leader.pid, start_ticks(leader.pid) or 0, ("sleep",), group=leader.pid)
        listed = sum(name.isdigit() for name in os.listdir("/proc"))
        return {"processes": listed, "scan_ms": cpu_ms(lambda: process.any_live_member(leader.pid), repeats),
                "leader_ms": cpu_ms(lambda: process.group_alive(record), repeats)}
    finally:
        for child in [*beside, leader]:
            child.kill()
            child.wait()


def main(extras: tuple = (0, 300, 1000), repeats: int = 200) -> None:
    """Times both checks at each count of extra processes and writes bench/RESULTS-watch.md."""
    setting = machine()
    rows = [measure(extra, repeats) for extra in extras]
    lines = ["# The launcher's look at a task", "",
             f"Measured on {setting['date']}: {setting['cores']} cores ({setting['cpu']}), load average "
             f"{setting['load_before']:.2f} before; `python -m bench.workload.watch`, {repeats} checks each.", "",
             "| processes in /proc | every stat read (before) | the leader's (now) |", "| ---: | ---: | ---: |"]
    lines += [f"| {row['processes']} | {row['scan_ms']:.2f} ms | {row['leader_ms']:.3f} ms |" for row in rows]
    write_keeping_notes(HERE / "RESULTS-watch.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    fire.Fire(main)
