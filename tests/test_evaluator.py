"""The sidecar evaluator beside a real chief on loopback: every checkpoint once, best kept, restart-safe."""

from __future__ import annotations

import json
import signal
import time

import pytest

from clusterkit import (assert_no_traceback, cluster_document, derive_cluster, finish, read_scalars, run_module,
                        start_module, wait_for_line, write_cluster)

pytestmark = pytest.mark.cluster


def run_chief_and_evaluator(cluster, tmp_path):
    chief = start_module("coordinator.train", "--cluster", str(cluster), log_path=tmp_path / "chief.log")
    evaluator = start_module("evaluator.sidecar", "--cluster", str(cluster), log_path=tmp_path / "evaluator.log")
    return chief, evaluator



def test_each_checkpoint_evaluated_once_through_a_restart_and_best_model_kept(shared_servers, tmp_path):
    """The evaluator killed after ckpt-1 and started again: it skips what it has done, scores each checkpoint once,
    and keeps the best model, which a fresh process with no cluster scores the same."""
    output = tmp_path / "output"
    cluster = derive_cluster(shared_servers, tmp_path, training={
        "epochs": 3, "steps_per_epoch": 120, "steps_per_execution": 1, "lr_decay_epochs": [3], "keep_checkpoints": 2,
        "output_dir": str(output)}, evaluation={"poll_s": 0.5, "idle_timeout_s": 300})
    chief, evaluator = run_chief_and_evaluator(cluster, tmp_path)
    try:
        assert wait_for_line(tmp_path / "evaluator.log", "eval | ckpt-1", 300, evaluator)
        evaluator.send_signal(signal.SIGKILL)
        evaluator.wait()
        restarted = start_module("evaluator.sidecar", "--cluster", str(cluster),
                                 log_path=tmp_path / "evaluator-2.log")
        codes = finish(chief, restarted, timeout_s=600)
    finally:
        finish(chief, evaluator, timeout_s=1)
    assert codes == [0, 0], (tmp_path / "chief.log").read_text()[-2000:] + (tmp_path / "evaluator-2.log").read_text()
    assert "resuming: 1 checkpoints already done (ckpt-1)" in (tmp_path / "evaluator-2.log").read_text()
    validation = read_scalars(output / "tensorboard" / "validation")
    assert [step for step, _ in validation["accuracy"]] == [120, 240, 360]  # none twice, none missing
    assert [step for step, _ in validation["loss"]] == [120, 240, 360]
    assert set(read_scalars(output / "tensorboard" / "train")) >= {"accuracy", "loss"}  # one chart per tag

    state = json.loads((output / "checkpoints" / "evaluated.json").read_text())
    assert state["evaluated"] == ["ckpt-1", "ckpt-2", "ckpt-3"] and state["skipped"] == {}
    best = json.loads((output / "best_model" / "best.json").read_text())
    best_value = max(value for _, value in validation["accuracy"])
    assert best["metrics"]["val_accuracy"] == pytest.approx(best_value)
    assert best["step"] == next(step for step, value in validation["accuracy"] if value == best_value)

    # the exported best model, in a fresh process with no cluster, reproduces the recorded metric
    report = tmp_path / "best_eval.json"
    fresh = run_module("evaluator.sidecar", "--cluster", str(cluster), "--model",
                       str(output / "best_model" / "model.h5"), "--split", "validation",
                       "--output_json", str(report))
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert json.loads(report.read_text())["metrics"]["validation_accuracy"] == pytest.approx(
        best["metrics"]["val_accuracy"], abs=1e-6)


def test_evaluator_gives_up_when_training_died(tmp_path, shared_servers):
    output = tmp_path / "output"
    output.mkdir()
    (output / "summary.json").write_text(json.dumps({"status": "running", "epochs": 6}))
    cluster = derive_cluster(shared_servers, tmp_path, training={"output_dir": str(output)},
                             evaluation={"poll_s": 0.5, "idle_timeout_s": 3})
    started = time.monotonic()
    result = run_module("evaluator.sidecar", "--cluster", str(cluster), timeout_s=120)
    assert result.returncode == 1
    assert "no new checkpoint in" in result.stderr and "is the chief running?" in result.stderr
    assert time.monotonic() - started < 60


def test_split_without_a_one_off_evaluation_is_one_line(tmp_path):
    path = write_cluster(tmp_path, cluster_document())
    result = run_module("evaluator.sidecar", "--cluster", str(path), "--split", "test")
    assert result.returncode == 2
    assert_no_traceback(result.stderr)
    assert result.stderr.strip().splitlines() == [
        "error: --split = 'test': applies to a one-off evaluation only (following training always reads the "
        "validation split); add --checkpoint PATH or --model PATH"]
