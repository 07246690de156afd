"""The chief on a real loopback cluster (2 workers, 2 ps): trains, checkpoints, resumes, exports."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from clusterkit import PYTHON, assert_no_traceback, read_scalars, run_module, start_module, wait_for_line

pytestmark = pytest.mark.cluster

LOAD_EXPORTS = """
import sys, numpy as np, tf_keras
model_dir = sys.argv[1]
reference = np.load(model_dir + "/reference_predictions.npz")
for name in ("model.h5", "saved_model", "model.keras"):
    model = tf_keras.models.load_model(model_dir + "/" + name)
    print(name, float(np.abs(model.predict(reference["inputs"], verbose=0) - reference["predictions"]).max()))
"""


def chief_arguments(cluster: Path, output: Path, *options: str) -> list[str]:
    return ["--cluster", str(cluster), "--output_dir", str(output), *options]


def start_chief(cluster: Path, output: Path, log_path: Path, *options: str):
    """The chief, forked when it can be (clusterkit.start_module), its output in `log_path`."""
    return start_module("coordinator.train", *chief_arguments(cluster, output, *options), log_path=log_path)


def run_chief(cluster: Path, output: Path, *options: str) -> subprocess.CompletedProcess:
    return run_module("coordinator.train", *chief_arguments(cluster, output, *options), timeout_s=600)


@pytest.fixture(scope="module")
def trained(shared_servers, tmp_path_factory):
    """One full run shared by the checks below: 3 epochs of the CNN on the embedded digits."""
    output = tmp_path_factory.mktemp("trained") / "output"
    result = run_chief(shared_servers, output, "--epochs", "3", "--lr_decay_epochs", "[3]", "--keep_checkpoints", "2")
    assert result.returncode == 0, result.stderr[-4000:]
    return output, result.stderr


def test_progress_lines_and_loss_going_down(trained):
    output, log = trained
    lines = [line for line in log.splitlines() if "train | epoch" in line]
    assert len(lines) == 3 and all(line.startswith("[chief:0] ") for line in lines)
    for field in ("steps/s", "ex/s", "loss", "accuracy", "lr", "ETA"):
        assert field in lines[0]
    losses = [float(line.split("| loss ")[1].split()[0]) for line in lines]
    assert losses[2] < losses[0]


def test_optimizer_steps_match_the_plan(trained):
    summary = json.loads((trained[0] / "summary.json").read_text())
    planned = summary["epochs"] * summary["steps_per_epoch"]
    assert summary["status"] == "complete"
    assert summary["steps_per_epoch"] == 1437 // (32 * 2)  # train examples // (per-worker batch x workers)
    assert summary["optimizer_steps"] == planned  # no failure here, so no re-run closure


def test_tensorboard_has_train_scalars_at_optimizer_steps(trained):
    scalars = read_scalars(trained[0] / "tensorboard" / "train")
    steps_per_epoch = json.loads((trained[0] / "summary.json").read_text())["steps_per_epoch"]
    for tag in ("loss", "accuracy", "learning_rate", "steps_per_sec"):
        assert [step for step, _ in scalars[tag]] == [steps_per_epoch * e for e in (1, 2, 3)], tag
    assert [round(v, 6) for _, v in scalars["learning_rate"]] == [1e-3, 1e-3, 1e-4]


def test_checkpoints_on_the_chiefs_disk(trained):
    names = sorted(p.name for p in (trained[0] / "checkpoints").glob("*.index"))
    assert names == ["ckpt-2.index", "ckpt-3.index"]  # keep_checkpoints=2 and no evaluator to wait for


def test_large_layer_is_sharded_over_both_ps(trained):
    placement = json.loads((trained[0] / "summary.json").read_text())["variable_placement"]
    assert sorted(placement["dense/kernel"]) == ["/job:ps/replica:0/task:0/device:CPU:0",
                                                 "/job:ps/replica:0/task:1/device:CPU:0"]
    assert len(placement["dense_1/kernel"]) == 1  # 128x10 floats stay whole: below min_shard_bytes


def test_exports_load_in_a_plain_process_and_predict_the_same(trained):
    result = subprocess.run([PYTHON, "-c", LOAD_EXPORTS, str(trained[0] / "model")], capture_output=True,
                            text=True, timeout=300, env={"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
                                                         "CUDA_VISIBLE_DEVICES": "-1"})
    assert result.returncode == 0, result.stderr[-3000:]
    differences = {line.split()[0]: float(line.split()[1]) for line in result.stdout.splitlines()}
    assert set(differences) == {"model.h5", "saved_model", "model.keras"}
    assert max(differences.values()) < 1e-5, differences


def test_finished_run_is_not_trained_again(shared_servers, trained):
    again = run_chief(shared_servers, trained[0], "--epochs", "3", "--lr_decay_epochs", "[3]",
                      "--keep_checkpoints", "2")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already complete: 3 of 3 epochs" in again.stderr
    assert "train | epoch" not in again.stderr


def test_killed_chief_resumes_at_the_next_epoch(shared_servers, tmp_path):
    output = tmp_path / "output"
    options = ("--epochs", "3", "--steps_per_epoch", "150", "--steps_per_execution", "1")
    log_path = tmp_path / "chief.log"
    chief = start_chief(shared_servers, output, log_path, *options)
    try:
        assert wait_for_line(log_path, "train | epoch 1/3", timeout_s=300, process=chief), log_path.read_text()
        chief.send_signal(signal.SIGKILL)
    finally:
        chief.kill()
        chief.wait()
    assert "epoch 2/3" not in log_path.read_text()  # killed during epoch 2

    resumed = run_chief(shared_servers, output, *options)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming after epoch 1 from ckpt-1 (optimizer step 150)" in resumed.stderr
    epochs_run = [line.split("train | epoch ")[1].split()[0] for line in resumed.stderr.splitlines()
                  if "train | epoch" in line]
    assert epochs_run == ["2/3", "3/3"]
    summary = json.loads((output / "summary.json").read_text())
    assert 450 <= summary["optimizer_steps"] <= 450 + 1  # at-least-once: up to steps_per_execution per failure


def test_bad_option_is_one_line(shared_servers, tmp_path):
    result = run_chief(shared_servers, tmp_path, "--per_worker_batch", "0")
    assert result.returncode == 2
    assert_no_traceback(result.stderr)
    assert result.stderr.strip() == ("error: --per_worker_batch = 0: must be an integer from 1 to 2147483647; "
                                     "use e.g. 32")


def test_unreachable_ps_is_named_instead_of_hanging(tmp_path):
    from clusterkit import cluster_document, write_cluster

    cluster = write_cluster(tmp_path, cluster_document(evaluator=False, training={"probe_timeout_s": 1}))
    result = run_module("coordinator.train", "--cluster", str(cluster), "--output_dir", str(tmp_path / "out"))
    assert result.returncode == 3
    assert_no_traceback(result.stderr)
    assert "error: ps:0 at localhost:" in result.stderr and "did not answer within 1 s" in result.stderr
