"""A loopback cluster for benchmarks, started by the toolkit's own supervisor, and what its processes cost.

Figures read from /proc: bytes sent over the loopback interface while the chief ran (/proc/net/dev; run
nothing else meanwhile: it counts every process), and each process's peak resident memory (VmHWM), or, for a
chief that ran to its end, `ru_maxrss` from wait4.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from cluster import config as cluster_config
from launcher import process
from launcher.supervisor import Supervisor

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
STEPS_PER_S = re.compile(r"\| ([\d.]+) steps/s \|")


def median_after_first(values: list[float]) -> float:
    """The median of per-epoch figures without the first epoch (it traces and warms up)."""
    return statistics.median(values[1:] if len(values) > 1 else values)


def loopback_bytes() -> int:
    """Bytes sent over the loopback interface since boot (every byte sent on it is also received once)."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == "lo":
            return int(counters.split()[8])
    raise RuntimeError("no loopback interface in /proc/net/dev")


def peak_rss_mib(pid: int) -> float:
    """Peak resident memory of a running process (VmHWM), in MiB."""
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmHWM"))
    return int(line.split()[1]) / 1024


def _wait_with_usage(child: subprocess.Popen, timeout_s: float):
    """wait4 with a deadline: the exit status and resource usage, or TimeoutError after killing the child."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            return status, usage
        time.sleep(0.2)
    child.kill()
    os.wait4(child.pid, 0)
    raise TimeoutError(f"coordinator.train did not finish within {timeout_s:.0f} s")


class LoopbackCluster:
    """ps and workers on free loopback ports; `chief()` runs coordinator.train against them and measures it."""

    def __init__(self, directory: Path, workers: int = 1, ps: int = 1, env: dict | None = None):
        sys.path.insert(0, str(ROOT / "tests"))
        from clusterkit import cluster_document, write_cluster

        directory.mkdir(parents=True, exist_ok=True)
        document = cluster_document(workers=workers, ps=ps, evaluator=False, logs_dir=str(directory / "logs"))
        self.path = write_cluster(directory, document)
        self.logs = directory / "logs"
        self.env = env or {}
        self.supervisor = Supervisor(cluster_config.load(self.path), lambda message: None)

    def __enter__(self):
        saved = {name: os.environ.get(name) for name in self.env}
        os.environ.update(self.env)  # the servers inherit the launcher's environment
        try:
            self.supervisor.start_servers()
        finally:
            for name, value in saved.items():
                os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
        return self

    def __exit__(self, *exc):
        self.supervisor.stop_everything()

    def server_pids(self, job: str) -> list[int]:
        records = [process.PidRecord.read(self.logs / f"{t.job}-{t.index}.pid")
                   for t in self.supervisor.config.tasks((job,))]
        return [r.pid for r in records]  # each task's own Python process (no wrapper)

    def chief(self, output: Path, timeout_s: float = 900, **options) -> dict:
        """Runs coordinator.train with these option overrides on synthetic data and returns its figures:
        median steps/s of the epochs after the first, steps, loopback bytes per step, peak RSS of every role."""
        arguments = [f"--{key}={json.dumps(value)}" for key, value in options.items()]
        ps_pids = self.server_pids("ps")
        before = loopback_bytes()
        output.mkdir(parents=True, exist_ok=True)
        with open(output / "chief.log", "w+") as log:
            chief = subprocess.Popen([PYTHON, "-m", "coordinator.train", "--cluster", str(self.path),
                                      "--output_dir", str(output), "--dataset", "synthetic", *arguments], cwd=ROOT,
                                     stdout=subprocess.DEVNULL, stderr=log, env={**os.environ, **self.env})
            status, usage = _wait_with_usage(chief, timeout_s)
            log.seek(0)
            stderr = log.read()
        chief.returncode = os.waitstatus_to_exitcode(status)
        moved = loopback_bytes() - before
        values = [float(m[1]) for m in map(STEPS_PER_S.search, stderr.splitlines()) if m]
        if chief.returncode != 0 or not values:
            raise RuntimeError(stderr[-3000:])
        steps = json.loads((output / "summary.json").read_text())["optimizer_steps"]
        return {"steps_per_s": median_after_first(values), "steps": steps,
                "loopback_mb_per_step": moved / steps / 1e6,
                "rss_mib": {"chief": usage.ru_maxrss / 1024,
                            "worker": max(peak_rss_mib(p) for p in self.server_pids("worker")),
                            "ps": max(peak_rss_mib(p) for p in ps_pids)}}
