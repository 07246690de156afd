"""Chaos on a schedule: 2 ps + 2 workers on loopback, SIGKILLs across workers, ps, the chief and the evaluator,
for the CNN and for DLRM (whose split tables and their optimizer slots must survive each restore).

The run must finish its planned epochs, lose at most one epoch per ps or chief kill, have every kept
checkpoint scored by the evaluator, and leave no process or listening port behind.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from clusterkit import ROOT, cluster_document, processes_mentioning, wait_for_launcher, write_cluster
from modelaxis import each_model, training as model_training
from common import net
from launcher import process

pytestmark = pytest.mark.cluster

EPOCHS, STEPS = 5, 120
# after checkpoint N is written, SIGKILL this task (its own pid, as `sh run.sh status` shows it)
SCHEDULE = ((1, "worker-1"), (2, "ps-1"), (3, "chief-0"), (4, "evaluator-0"), (4, "worker-0"))


def checkpoints_written(output) -> int:
    state = output / "checkpoints" / "checkpoint"
    found = re.findall(r'ckpt-(\d+)"', state.read_text()) if state.exists() else []
    return max(map(int, found), default=0)


def wait_for_checkpoint(output, epoch: int, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while checkpoints_written(output) < epoch:
        assert time.monotonic() < deadline, f"no ckpt-{epoch} within {timeout_s} s"
        time.sleep(0.2)


@each_model
def test_scheduled_kills_heal_and_the_run_completes(tmp_path, model):
    output, logs = tmp_path / "output", tmp_path / "logs"
    training = model_training(model, epochs=EPOCHS, steps_per_epoch=STEPS, steps_per_execution=1, lr_decay_epochs=[],
                              keep_checkpoints=3, output_dir=str(output))
    document = {**cluster_document(workers=2, ps=2, logs_dir=str(logs), training=training),
                "evaluation": {"poll_s": 0.5, "idle_timeout_s": 300}}
    document["launcher"].update(restart_backoff_s=0.5, poll_s=0.5, max_restarts=3)
    path = write_cluster(tmp_path, document)
    started = subprocess.run(["sh", str(ROOT / "run.sh"), "--detach", str(path)], capture_output=True, text=True,
                             timeout=120, stdin=subprocess.DEVNULL)
    assert started.returncode == 0, started.stderr
    try:
        for epoch, name in SCHEDULE:
            wait_for_checkpoint(output, epoch)
            record = process.PidRecord.read(logs / f"{name}.pid")
            assert record and process.is_running(record), f"{name} is not running at ckpt-{epoch}"
            os.kill(record.pid, signal.SIGKILL)
        log = wait_for_launcher(logs, timeout_s=900)
    finally:
        subprocess.run(["sh", str(ROOT / "kill.sh"), str(path)], capture_output=True, timeout=180)

    summary = json.loads((output / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["epochs"] == EPOCHS, log[-3000:]
    assert EPOCHS * STEPS <= summary["optimizer_steps"] <= EPOCHS * STEPS + 2  # at-least-once per worker kill
    resumed = [int(k) for k in re.findall(r"resuming after epoch (\d+)", (logs / "chief-0.log").read_text())]
    assert len(resumed) == 2 and resumed[0] >= 2 and resumed[1] >= 3, resumed  # at most one epoch lost per kill
    for _, name in SCHEDULE:
        assert f"{name.replace('-', ':')} died; restarting" in log, log[-3000:]
    assert "stopped ps:0, ps:1: they start again with chief:0" in log, log  # no dead chief's tables on them
    assert log.count("ps:0 started on") >= 2 and log.count("ps:1 started on") >= 3, log  # fresh processes

    kept = re.findall(r'all_model_checkpoint_paths: "(ckpt-\d+)"', (output / "checkpoints" / "checkpoint").read_text())
    state = json.loads((output / "checkpoints" / "evaluated.json").read_text())
    assert kept and all(name in state["results"] for name in kept), (kept, state)
    assert state["skipped"] == {}
    ports = [int(a.split(":")[1]) for job in ("worker", "ps") for a in document["cluster"][job]]
    assert processes_mentioning(str(path)) == [] and [p for p in ports if net.answers("localhost", p)] == []
