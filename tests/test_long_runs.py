"""Long runs on a real loopback cluster (2 workers, 2 ps): checkpoints within epochs, SIGTERM, mid-epoch resume."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from clusterkit import ROOT, assert_no_traceback, wait_for_line
from test_coordinator import chief_command, run_chief

pytestmark = pytest.mark.cluster

STEPS_PER_EPOCH = 400
OPTIONS = ("--epochs", "2", "--steps_per_epoch", str(STEPS_PER_EPOCH), "--steps_per_execution", "2",
           "--lr_decay_epochs", "[]", "--progress_every_s", "1")


def start_chief(cluster: Path, output: Path, log_path: Path, *options: str) -> subprocess.Popen:
    with open(log_path, "wb") as log:
        return subprocess.Popen(chief_command(cluster, output, *OPTIONS, *options), cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def stop(chief: subprocess.Popen) -> int:
    try:
        return chief.wait(timeout=120)
    finally:
        chief.kill()
        chief.wait()


def checkpoint_names(output: Path) -> list[str]:
    return sorted(p.name.removesuffix(".index") for p in (output / "checkpoints").glob("ckpt-*.index"))


def resumed_from(log: str) -> tuple[str, int]:
    """The checkpoint a resumed chief named and its optimizer step."""
    match = re.search(r"resuming from (ckpt-[\d-]+) \(.*optimizer step (\d+)\)", log)
    assert match, log[-3000:]
    return match.group(1), int(match.group(2))


def test_sigterm_writes_a_checkpoint_and_the_resume_redoes_no_step(shared_servers, tmp_path):
    output, log_path = tmp_path / "output", tmp_path / "chief.log"
    chief = start_chief(shared_servers, output, log_path, "--checkpoint_every_s", "0")
    try:
        assert wait_for_line(log_path, "train | epoch 1/2", timeout_s=300, process=chief), log_path.read_text()
        chief.send_signal(signal.SIGTERM)
        code = chief.wait(timeout=60)
    finally:
        stop(chief)
    log = log_path.read_text()
    assert code == 4, log[-3000:]
    assert_no_traceback(log)
    assert "stopped as asked: checkpoint ckpt-0-" in log
    names = checkpoint_names(output)
    assert len(names) == 1 and names[0].startswith("ckpt-0-"), names  # within epoch 1: only the SIGTERM's save

    resumed = run_chief(shared_servers, output, *OPTIONS, "--checkpoint_every_s", "0")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    name, step = resumed_from(resumed.stderr)
    assert name == names[0] and step == int(name.split("-")[2])  # the checkpoint holds exactly the steps it names
    summary = json.loads((output / "summary.json").read_text())
    assert summary["optimizer_steps"] == 2 * STEPS_PER_EPOCH  # no step redone, none skipped


def test_killed_chief_resumes_within_the_epoch(shared_servers, tmp_path):
    output, log_path = tmp_path / "output", tmp_path / "chief.log"
    chief = start_chief(shared_servers, output, log_path, "--checkpoint_every_s", "2")
    try:
        assert wait_for_line(log_path, "checkpoint ckpt-0-", timeout_s=300, process=chief), log_path.read_text()
        time.sleep(1.0)  # mid-interval: some steps after the checkpoint are lost with the chief
        chief.send_signal(signal.SIGKILL)
    finally:
        stop(chief)
    first_log = log_path.read_text()
    rates = [float(m) for m in re.findall(r"\| ([\d.]+) steps/s \|", first_log)]

    resumed = run_chief(shared_servers, output, *OPTIONS, "--checkpoint_every_s", "2")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    name, step = resumed_from(resumed.stderr)
    assert name.startswith("ckpt-0-") and 0 < step < STEPS_PER_EPOCH  # within epoch 1, not at its start
    redone = json.loads((output / "summary.json").read_text())["optimizer_steps"] - 2 * STEPS_PER_EPOCH
    interval_steps = 2.0 * max(rates, default=STEPS_PER_EPOCH)
    assert 0 <= redone <= 1.5 * interval_steps + 4, (redone, rates)  # at most about one checkpoint interval
    assert checkpoint_names(output)[-1] == "ckpt-2"
