"""`python -m bench.workload.watch`: what the launcher's look at its tasks costs.

At each poll (launcher.poll_s) the launcher asks whether each task's process group lives. Until 2026-12-07 every
answer read the stat of every process in /proc (`launcher.process.any_live_member`); now a group whose leader lives,
or that has no process left, is told from the leader alone (`launcher.process.group_alive`). This times both with
`extra` sleeping processes beside. At an ssh host the look is the agent's: until 2026-12-07 a new agent process each
look, now one kept running for them (launcher/backends/ssh/session.py); this times both here, without the ssh
around them, and writes bench/RESULTS-watch.md (machine, date, load average; notes kept).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import fire

from bench.__main__ import machine, write_keeping_notes
from common.proc import start_ticks
from launcher import process
from launcher.backends.ssh.session import AgentSession

HERE = Path(__file__).resolve().parent.parent
SHIPPED_CLUSTER = HERE.parent / "cluster.json"
TASKS = "chief:0,worker:0,worker:1,ps:0,ps:1,evaluator:0"  # the shipped cluster's, none running


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


def cpu_s_with_children() -> float:
    """This process's CPU seconds and its waited-for children's."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def agent_looks(looks: int) -> dict:
    """The CPU-milliseconds of one look at the shipped cluster's tasks through the agent: a new agent each look,
    and one agent kept for all of them (its start and end included)."""
    agent = [sys.executable, "-m", "launcher.agent"]
    started = cpu_s_with_children()
    for _ in range(looks):
        subprocess.run([*agent, "status", "--cluster", str(SHIPPED_CLUSTER), "--tasks", TASKS], check=True,
                       capture_output=True, stdin=subprocess.DEVNULL)
    new_each = cpu_s_with_children() - started
    started, session = cpu_s_with_children(), AgentSession("here", [*agent, "status_lines", "--cluster",
                                                                    str(SHIPPED_CLUSTER)], timeout_s=60)
    for _ in range(looks):
        session.ask(TASKS)
    session.close()
    return {"looks": looks, "new_each_ms": new_each / looks * 1000,
            "kept_ms": (cpu_s_with_children() - started) / looks * 1000}


def main(extras: tuple = (0, 300, 1000), repeats: int = 200, looks: int = 50) -> None:
    """Times both checks at each count of extra processes, and both ways of asking the agent, and writes
    bench/RESULTS-watch.md."""
    setting = machine()
    rows = [measure(extra, repeats) for extra in extras]
    asked = agent_looks(looks)
    lines = ["# The launcher's look at a task", "",
             f"Measured on {setting['date']}: {setting['cores']} cores ({setting['cpu']}), load average "
             f"{setting['load_before']:.2f} before; `python -m bench.workload.watch`, {repeats} checks each.", "",
             "| processes in /proc | every stat read (before) | the leader's (now) |", "| ---: | ---: | ---: |"]
    lines += [f"| {row['processes']} | {row['scan_ms']:.2f} ms | {row['leader_ms']:.3f} ms |" for row in rows]
    lines += ["", f"A look at the shipped cluster's six tasks through the agent, here, without ssh ({asked['looks']} "
              "looks, CPU of this process and its children):", "", "| a new agent each look (before) | one agent kept "
              "(now) |", "| ---: | ---: |", f"| {asked['new_each_ms']:.1f} ms | {asked['kept_ms']:.2f} ms |"]
    write_keeping_notes(HERE / "RESULTS-watch.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    fire.Fire(main)
