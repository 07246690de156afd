"""An epoch longer than the launcher's stall timeout trains through: the chief reports progress all epoch long."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from clusterkit import ROOT, cluster_document, processes_mentioning, write_cluster

pytestmark = pytest.mark.cluster

STEPS = 900  # 20-45 s at the 20-45 steps/s 2 workers reach on a 2-core machine: longer than the stall timeout
STALL_TIMEOUT_S = 15


def test_150000_examples_train_through_an_epoch_longer_than_the_stall_timeout_with_no_chief_restart(tmp_path):
    """Issue 18: with 150,000 synthetic examples the step seemed to stop after the first few dozen and the
    watchdog restarted the chief. Keras had scheduled the whole epoch and waited for it with no batch hook, so
    no heartbeat was written; the epoch (capped here) must now show progress lines in its second half."""
    training = {"dataset": "synthetic", "synthetic_examples": 150_000, "epochs": 1, "steps_per_epoch": STEPS,
                "lr_decay_epochs": [], "progress_every_s": 2, "output_dir": str(tmp_path / "output")}
    document = cluster_document(logs_dir=str(tmp_path / "logs"), training=training, evaluator=False)
    document["launcher"]["stall_timeout_s"] = STALL_TIMEOUT_S
    path = write_cluster(tmp_path, document)
    result = subprocess.run(["sh", str(ROOT / "run.sh"), str(path)], capture_output=True, text=True, timeout=600,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "stall:" not in result.stderr and "restarting" not in result.stderr, result.stderr[-4000:]
    assert result.stderr.count("chief:0 started") == 1, result.stderr[-4000:]
    steps = [int(step) for step in re.findall(r"train \| epoch 1/1 \| step (\d+)/", result.stderr)]
    assert [step for step in steps if STEPS // 2 <= step < STEPS], f"no progress line in the epoch's second " \
        f"half (steps shown: {steps}): batch hooks stopped once Keras had scheduled the epoch"
    summary = json.loads((tmp_path / "output" / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["optimizer_steps"] >= STEPS
    assert summary["train_seconds"] > STALL_TIMEOUT_S, summary  # else the watchdog was never put to the test
    assert processes_mentioning(str(path)) == []
