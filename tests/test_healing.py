"""Faults on a schedule against the launcher on loopback: a lost worker, ps or chief heals and the run completes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from clusterkit import (ROOT, cluster_document, processes_mentioning, wait_for_launcher, wait_for_line,
                        write_cluster)
from launcher import process

pytestmark = pytest.mark.cluster

EPOCHS = 3
SLOW_EPOCHS = {"epochs": EPOCHS, "steps_per_epoch": 100, "steps_per_execution": 1, "lr_decay_epochs": []}


@pytest.fixture
def detached_run(tmp_path):
    """Starts `sh run.sh --detach` on a fresh loopback cluster; yields helpers; always ends with kill.sh."""
    logs = tmp_path / "logs"
    training = {**SLOW_EPOCHS, "output_dir": str(tmp_path / "output")}
    document = {**cluster_document(logs_dir=str(logs), training=training),
                "evaluation": {"poll_s": 0.5, "idle_timeout_s": 120},
                }
    document["launcher"].update(restart_backoff_s=0.5, poll_s=0.5)
    path = write_cluster(tmp_path, document)
    started = subprocess.run(["sh", str(ROOT / "run.sh"), "--detach", str(path)], capture_output=True, text=True,
                             timeout=120, stdin=subprocess.DEVNULL)
    assert started.returncode == 0, started.stderr
    try:
        yield path, logs
    finally:
        subprocess.run(["sh", str(ROOT / "kill.sh"), str(path)], capture_output=True, timeout=180)


def kill_task(logs, name: str) -> None:
    record = process.PidRecord.read(logs / f"{name}.pid")
    assert record and process.is_running(record), f"{name} is not running"
    os.killpg(record.pid, signal.SIGKILL)


def completed_summary(tmp_path) -> dict:
    summary = json.loads((tmp_path / "output" / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["epochs"] == EPOCHS
    return summary


def test_killed_worker_is_replaced_and_the_run_completes(detached_run, tmp_path):
    path, logs = detached_run
    assert wait_for_line(logs / "chief-0.log", "split into", 180)  # the model is built; epoch 1 begins
    time.sleep(1.0)
    kill_task(logs, "worker-1")
    log = wait_for_launcher(logs)
    assert "worker:1 died; restarting" in log or "worker:1 exited with code" in log, log
    assert "tasks: chief:0 exited" in log
    status = json.loads((logs / "status.json").read_text())
    assert {row["task"]: row["restarts"] for row in status["tasks"]}["worker:1"] == 1
    summary = completed_summary(tmp_path)
    assert 300 <= summary["optimizer_steps"] <= 300 + 1  # at-least-once: up to steps_per_execution per failure
    assert processes_mentioning(str(path)) == []


def test_killed_ps_restarts_ps_and_chief_losing_at_most_an_epoch(detached_run, tmp_path):
    path, logs = detached_run
    assert wait_for_line(logs / "chief-0.log", f"train | epoch 1/{EPOCHS}", 240)  # now in epoch 2
    kill_task(logs, "ps-0")
    log = wait_for_launcher(logs)
    assert "chief:0 stopped until every ps is back" in log, log
    chief_log = (logs / "chief-0.log").read_text()
    assert "resuming after epoch 1 (optimizer step 100)" in chief_log  # ckpt-1: epoch 2's work was redone
    summary = completed_summary(tmp_path)
    assert summary["optimizer_steps"] == 300
    assert processes_mentioning(str(path)) == []


def test_killed_chief_is_restarted_and_resumes(detached_run, tmp_path):
    path, logs = detached_run
    assert wait_for_line(logs / "chief-0.log", f"train | epoch 1/{EPOCHS}", 240)
    kill_task(logs, "chief-0")
    log = wait_for_launcher(logs)
    assert "chief:0 died; restarting" in log or "chief:0 exited with code" in log, log
    assert "resuming after epoch 1" in (logs / "chief-0.log").read_text()
    completed_summary(tmp_path)
    assert processes_mentioning(str(path)) == []


def test_user_error_is_not_restarted(tmp_path):
    training = {"model": "no_such_module:build", "output_dir": str(tmp_path / "output")}
    path = write_cluster(tmp_path, cluster_document(evaluator=False, logs_dir=str(tmp_path / "logs"),
                                                    training=training))
    result = subprocess.run(["sh", str(ROOT / "run.sh"), str(path)], capture_output=True, text=True, timeout=300,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 1
    assert "run failed: chief:0 exited with code 2 (a user error; not restarted)" in result.stderr
    assert "training.model = 'no_such_module:build': cannot be loaded" in result.stderr
    assert processes_mentioning(str(path)) == []


def test_stall_watchdog_restarts_a_silent_chief_and_gives_up_when_it_stays_silent(tmp_path):
    training = {"epochs": 2, "steps_per_epoch": 2000, "steps_per_execution": 1, "output_dir": str(tmp_path / "o")}
    document = cluster_document(evaluator=False, logs_dir=str(tmp_path / "logs"), training=training)
    document["launcher"].update(stall_timeout_s=4, max_restarts=1, restart_backoff_s=0.5, poll_s=0.5)
    path = write_cluster(tmp_path, document)
    result = subprocess.run(["sh", str(ROOT / "run.sh"), str(path)], capture_output=True, text=True, timeout=300,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 1
    assert "stall: chief:0 logged nothing for" in result.stderr
    assert "restarting in" in result.stderr
    assert "run failed: chief:0 died after 1 restarts (launcher.max_restarts)" in result.stderr
    assert processes_mentioning(str(path)) == []
