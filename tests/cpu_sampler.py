"""Where a command's CPU goes: samples /proc every few seconds while it runs and sums CPU-seconds per process kind
(ps, worker, chief, evaluator, exporter, pytest, daemons), per lane and per test module.

    .venv/bin/python tests/cpu_sampler.py --out /tmp/cpu.json -- sh tests/run.sh

A process is given to the test module that started it through `PYTEST_CURRENT_TEST` in its environment (a child
inherits it from the pytest that started it, so the launcher's tasks carry their test's name), and to its lane
through `PSCLUSTER_TEST_LANE`. Run it as root, alone: it reads every process of the machine. A process that ends
between two looks loses at most its last interval of CPU; one that lived less than an interval is counted whole.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# Daemons are known by their program (a task under slurmstepd has `test_slurm` in its cluster file's path); then the
# first mark a command line holds names its kind, a launcher only after the tasks it starts.
DAEMONS = ("slurmctld", "slurmd", "slurmstepd", "munged", "sshd", "tansu")
KINDS = (("--role ps", "ps"), ("--role worker", "worker"), ("coordinator.train", "chief"),
         ("evaluator.sidecar", "evaluator"), ("publish.export", "exporter"), ("publish.follower", "follower"),
         ("roles.launch", "launcher"), ("run.sh", "launcher"), ("kill.sh", "launcher"), ("-m pytest", "pytest"),
         ("tests/lanes.py", "pytest"))
OWN_CPU_VARIABLE = "PSCLUSTER_TEST_OWN_CPU"  # tests/conftest.py writes each pytest's own CPU by module there


def kind_of(command: str) -> str:
    if Path(command.split(" ", 1)[0]).name.startswith(DAEMONS):
        return "daemons"
    return next((kind for mark, kind in KINDS if mark in command), "other")


def cpu_seconds(pid: str) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime (fields 14 and 15 of stat)


def program_of(arguments: list[str]) -> str:
    """What a process runs, in a word or two: `ssh`, `python serving_client.py`, `python roles.launch`."""
    program = Path(arguments[0]).name if arguments else "?"
    if program.startswith("python") and len(arguments) > 1:
        module = arguments[2] if arguments[1] == "-m" and len(arguments) > 2 else arguments[1]
        return f"python {module if arguments[1] == '-m' else Path(module).name}"
    return program


def identity(pid: str) -> tuple[str, str, str, str, str] | None:
    """(kind, lane, test module, program, test) of a process, or None once it is gone."""
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
        environ = dict(item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                       if b"=" in item)
    except OSError:
        return None
    test = environ.get(b"PYTEST_CURRENT_TEST", b"").decode(errors="replace")
    lane = environ.get(b"PSCLUSTER_TEST_LANE", b"").decode() or "-"
    test = test.removesuffix(" (setup)").removesuffix(" (call)").removesuffix(" (teardown)").rsplit("/", 1)[-1]
    return kind_of(" ".join(arguments)), lane, test.split("::")[0] or "-", program_of(arguments), test or "-"


def sample(seen: dict, totals: collections.Counter) -> None:
    """One look at every process: the CPU each used since the last look goes to its (kind, lane, module)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        used = cpu_seconds(pid)
        if used is None:
            continue
        if pid not in seen:
            who = identity(pid)
            if who is None:
                continue
            seen[pid] = [who, 0.0]
        who, before = seen[pid]
        totals[who] += max(used - before, 0.0)
        seen[pid][1] = used


def by_module_and_kind(totals: collections.Counter, most: int = 40) -> dict:
    """The costliest (test module, process kind) pairs: which test's chiefs, workers, exporters cost the most."""
    sums = collections.Counter()
    for (kind, _lane, module, _program, _test), value in totals.items():
        sums[f"{module} {kind}"] += value
    return {name: round(value, 1) for name, value in sums.most_common(most)}


def summary(totals: collections.Counter, seconds: float) -> dict:
    def by(position: int, kind: str | None = None, most: int | None = None) -> dict:
        sums = collections.Counter()
        for key, value in totals.items():
            if kind in (None, key[0]):
                sums[key[position]] += value
        return {name: round(value, 1) for name, value in sums.most_common(most)}

    return {"wall_s": round(seconds), "cpu_s": round(sum(totals.values())), "by_kind": by(0), "by_lane": by(1),
            "by_module": by(2), "by_test": by(4, most=40), "other_by_program": by(3, "other", 20),
            "by_module_and_kind": by_module_and_kind(totals)}


def machine_ticks() -> tuple[int, int]:
    """The machine's busy and idle clock ticks so far, all cores (/proc/stat): busy counts what the per-process
    sums miss, a process that lived and ended between two samples."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields[:8]) - idle, idle


def machine_busy(ticks: list[tuple[int, int]], every: int) -> dict:
    """Busy CPU-seconds of the whole machine, and its busy share of each `every` samples (a minute by default)."""
    per_s = os.sysconf("SC_CLK_TCK")
    shares = []
    for start in range(0, len(ticks) - 1, every):
        (busy0, idle0), (busy1, idle1) = ticks[start], ticks[min(start + every, len(ticks) - 1)]
        shares.append(round((busy1 - busy0) / max(1, busy1 - busy0 + idle1 - idle0), 2))
    return {"machine_busy_cpu_s": round((ticks[-1][0] - ticks[0][0]) / per_s), "machine_busy_share": shares}


def pytest_own(folder: Path) -> dict:
    """Each pytest's own CPU-seconds by test module (the tests that train in process, their polling), summed over
    lanes: /proc cannot tell which test a pytest's CPU was for."""
    sums = collections.Counter()
    for path in folder.glob("*.json"):
        sums.update(json.loads(path.read_text()))
        path.unlink()
    folder.rmdir()
    return {name: round(value, 1) for name, value in sums.most_common()}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every_s", type=float, default=2.0)
    parser.add_argument("--out", default="cpu-sample.json")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    seen, totals, started = {}, collections.Counter(), time.monotonic()
    sample(seen, collections.Counter())  # what ran before the command is not its cost
    before, ticks = set(seen), [machine_ticks()]
    own_cpu = Path(tempfile.mkdtemp(prefix="pscluster-own-cpu-"))
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, env={**os.environ, OWN_CPU_VARIABLE: str(own_cpu)})
    while True:  # bounded by the command: it ends, or a Ctrl-C ends both
        time.sleep(options.every_s)
        sample(seen, totals)  # before the reap: an ended child is still a zombie whose CPU can be read
        ticks.append(machine_ticks())
        if process.poll() is not None:
            break
    started_kinds = collections.Counter(who[0] for pid, (who, _used) in seen.items() if pid not in before)
    result = {**summary(totals, time.monotonic() - started), "processes_by_kind": dict(started_kinds.most_common()),
              "pytest_own_by_module": pytest_own(own_cpu),
              **machine_busy(ticks, max(1, round(60 / options.every_s)))}
    Path(options.out).write_text(json.dumps(result, indent=2))
    print(f"[cpu] {result['cpu_s']} CPU-s in {result['wall_s']} s (the machine: {result['machine_busy_cpu_s']} "
          f"CPU-s busy); by kind {result['by_kind']}; by lane "
          f"{result['by_lane']}; per module in {options.out}", flush=True)
    return process.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
