"""Operations as a user meets them, timed from outside through the launcher (`sh run.sh`) on loopback.

- cold start: from `sh run.sh` (environment installed) to the chief's `first step done` line, and to the end
  of the default job (the shipped training options, on free ports);
- worker kill: SIGKILL worker:1 during epoch 2; the stall is how much longer that epoch took than the median
  of the others;
- ps kill: SIGKILL ps:0 during epoch 2; the time until the restarted chief's `first step done` line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.kit.cluster import ROOT
from launcher import process

EPOCH_LINE = re.compile(r"train \| epoch (\d+)/\d+ \| step \d+/\d+ \| ([\d.]+) steps/s")
FIRST_STEP = "first step done"


def _cluster(directory: Path, training: dict) -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    from clusterkit import cluster_document, write_cluster

    shipped = json.loads((ROOT / "cluster.json").read_text())["training"]
    document = cluster_document(logs_dir=str(directory / "logs"),
                                training={**shipped, "output_dir": str(directory / "output"), **training})
    document["launcher"].update(restart_backoff_s=0.5, poll_s=0.5)
    return write_cluster(directory, document)


def _wait_for(path: Path, text: str, timeout_s: float, after: int = 0) -> float:
    """Polls a log until `text` appears past byte `after`; returns the monotonic time it was seen."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_bytes()[after:].decode(errors="replace"):
            return time.monotonic()
        time.sleep(0.05)
    raise TimeoutError(f"{text!r} did not appear in {path} within {timeout_s:.0f} s")


def cold_start() -> dict:
    """Seconds from `sh run.sh` to the first finished step and to the end of the shipped job."""
    with tempfile.TemporaryDirectory() as scratch:
        path = _cluster(Path(scratch), {})
        started = time.monotonic()
        run = subprocess.Popen(["sh", str(ROOT / "run.sh"), str(path)], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        first_step = _wait_for(Path(scratch) / "logs" / "chief-0.log", FIRST_STEP, 300) - started
        code = run.wait(timeout=900)
        return {"to_first_step_s": round(first_step, 1), "to_end_s": round(time.monotonic() - started, 1),
                "exit_code": code}


def _detached(directory: Path, training: dict) -> Path:
    path = _cluster(directory, training)
    subprocess.run(["sh", str(ROOT / "run.sh"), "--detach", str(path)], check=True, capture_output=True,
                   stdin=subprocess.DEVNULL, timeout=120)
    return path


def _kill(logs: Path, name: str) -> None:
    record = process.PidRecord.read(logs / f"{name}.pid")
    os.killpg(record.pid, signal.SIGKILL)


def _finish(path: Path) -> None:
    subprocess.run(["sh", str(ROOT / "kill.sh"), str(path)], capture_output=True, timeout=300)


LONG_JOB = {"epochs": 5, "steps_per_epoch": 300, "lr_decay_epochs": []}


def _kill_in_epoch_2(name: str, after_kill) -> tuple[str, object]:
    """Runs LONG_JOB detached, SIGKILLs task `name` a second into epoch 2, calls `after_kill(logs, killed_at,
    chief_log_offset)`, waits for the chief to finish and stops everything; returns the chief's log and what
    `after_kill` returned."""
    with tempfile.TemporaryDirectory() as scratch:
        logs = Path(scratch) / "logs"
        path = _detached(Path(scratch), LONG_JOB)
        try:
            seen = _kill_and_watch(logs, name, after_kill)
        finally:
            _finish(path)
        return (logs / "chief-0.log").read_text(), seen


def _kill_and_watch(logs: Path, name: str, after_kill):
    _wait_for(logs / "chief-0.log", "train | epoch 1/", 300)
    time.sleep(1.0)
    offset = (logs / "chief-0.log").stat().st_size
    killed = time.monotonic()
    _kill(logs, name)
    seen = after_kill(logs, killed, offset)
    _wait_for(logs / "launcher.log", "chief:0 finished", 900)
    return seen


def worker_kill() -> dict:
    """The extra seconds of the epoch in which worker:1 was killed, against the median of the other epochs."""
    chief_log, _ = _kill_in_epoch_2("worker-1", lambda *_: None)
    lines = chief_log.splitlines()
    rates = {int(m[1]): float(m[2]) for m in map(EPOCH_LINE.search, lines) if m}
    seconds = {epoch: LONG_JOB["steps_per_epoch"] / rate for epoch, rate in rates.items()}
    normal = statistics.median(s for e, s in seconds.items() if e not in (1, 2))
    return {"epoch_s": {e: round(s, 2) for e, s in seconds.items()}, "stall_s": round(seconds[2] - normal, 2)}


def ps_kill() -> dict:
    """Seconds from SIGKILL of ps:0 during epoch 2 to the restarted chief's first finished step."""
    _, resumed = _kill_in_epoch_2("ps-0", lambda logs, killed, offset: _wait_for(
        logs / "chief-0.log", FIRST_STEP, 300, after=offset) - killed)
    return {"to_first_resumed_step_s": round(resumed, 1)}
