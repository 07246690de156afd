"""The synchronous strategies from the same cluster.json: one_device, mirrored and multi_worker_mirrored."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess

import pytest

from clusterkit import (ROOT, cluster_document, processes_mentioning, read_scalars, run_module, wait_for_launcher,
                        wait_for_line, write_cluster)
from cluster import config as cluster_config
from cluster import taskspec
from launcher import process
from common.errors import UserError

QUICK = {"epochs": 2, "steps_per_epoch": 20, "steps_per_execution": 5, "lr_decay_epochs": []}


def _load(tmp_path, training: dict, **document_options):
    return cluster_config.load(write_cluster(tmp_path, cluster_document(training=training, **document_options)))


# --- pure: which processes each strategy runs, with what TF_CONFIG -------------------------------------------

def test_multi_worker_mirrored_runs_the_workers_as_trainers_with_no_ps(tmp_path):
    config = _load(tmp_path, {"strategy": "multi_worker_mirrored"})
    assert config.strategy.launched_jobs == ("worker", "evaluator")
    assert config.lead.name == "worker:0"
    worker = config.task("worker", 1)
    assert taskspec.tf_config(config, worker) == {
        "cluster": {"worker": [str(a) for a in config.jobs["worker"]]}, "task": {"type": "worker", "index": 1}}
    command = taskspec.task_command(config, worker)
    assert command[1:] == ["-m", "coordinator.train", "--worker", "1", "--cluster", str(config.source)]


@pytest.mark.parametrize("strategy", ["mirrored", "one_device"])
def test_single_process_strategies_run_only_the_chief_without_a_cluster(tmp_path, strategy):
    config = _load(tmp_path, {"strategy": strategy})
    assert config.strategy.launched_jobs == ("chief", "evaluator")
    assert taskspec.tf_config(config, config.task("chief", 0)) == {}


def test_gpus_follow_the_strategy(tmp_path):
    document = cluster_document(training={"strategy": "mirrored"})
    document["hosts"] = {"localhost": {"gpus": [0, 1, 2, 3]}}
    mirrored = cluster_config.parse(document, tmp_path / "c.json")
    assert taskspec.visible_gpus(mirrored, mirrored.task("chief", 0)) == "0,1,2,3"
    document["training"]["strategy"] = "multi_worker_mirrored"
    collective = cluster_config.parse(document, tmp_path / "c.json")
    assert [taskspec.visible_gpus(collective, t) for t in collective.tasks(("worker",))] == ["0,1", "2,3"]


def test_each_strategy_needs_only_its_own_jobs(tmp_path):
    document = cluster_document(training={"strategy": "multi_worker_mirrored"})
    del document["cluster"]["ps"], document["cluster"]["chief"]
    assert cluster_config.parse(document, tmp_path / "c.json").jobs["worker"]
    document["training"]["strategy"] = "mirrored"
    with pytest.raises(UserError) as raised:
        cluster_config.parse(document, tmp_path / "c.json")
    assert "cluster.chief = None: needs exactly one chief" in raised.value.lines()[0]


def test_custom_loop_is_refused_under_parameter_server(tmp_path):
    with pytest.raises(UserError) as raised:
        _load(tmp_path, {"loop": "custom"})
    assert raised.value.lines() == [
        f"error: {tmp_path / 'cluster.json'}: training.loop = 'custom': the custom loop needs a synchronous "
        "strategy; use \"loop\": \"fit\" with parameter_server, or another strategy"]


# --- real training ------------------------------------------------------------------------------------------

def _assert_trained_and_exported(output, epochs: int = 2) -> dict:
    summary = json.loads((output / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["epochs"] == epochs
    assert summary["optimizer_steps"] == epochs * 20
    for path in summary["model"].values():
        assert os.path.exists(path)
    assert [step for step, _ in read_scalars(output / "tensorboard" / "train")["loss"]] == [20, 40][:epochs]
    return summary


@pytest.mark.cluster
@pytest.mark.parametrize("strategy,loop", [("one_device", "fit"), ("mirrored", "custom")])
def test_single_process_strategy_trains_and_exports(tmp_path, strategy, loop):
    output = tmp_path / "output"
    path = write_cluster(tmp_path, cluster_document(evaluator=False, training={
        **QUICK, "strategy": strategy, "loop": loop, "backup_every_steps": 10, "output_dir": str(output)}))
    result = run_module("coordinator.train", "--cluster", str(path), timeout_s=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[chief:0] " in result.stderr and f"{strategy} over 1 replica(s)" in result.stderr
    summary = _assert_trained_and_exported(output)
    assert summary["strategy"] == strategy and summary["ps"] == 0
    assert (loop == "custom") == (output / "backup").is_dir()


def _launcher_run(tmp_path, training: dict, **launcher):
    logs = tmp_path / "logs"
    document = {**cluster_document(logs_dir=str(logs), training={**training, "output_dir": str(tmp_path / "output")}),
                "evaluation": {"poll_s": 0.5, "idle_timeout_s": 120}}
    document["launcher"].update(restart_backoff_s=0.5, poll_s=0.5, **launcher)
    return write_cluster(tmp_path, document), logs


def test_the_group_restarts_with_the_killed_worker_when_a_peer_it_took_down_is_seen_gone_in_the_same_look(tmp_path):
    """worker:0 exits with code 3 the moment a killed worker:1 leaves the collective; when one status look sees both
    gone, the cause is the one named (pure logic; the run is the test below)."""
    from launcher.backends.base import TaskStatus
    from launcher.records import TaskState
    from launcher.supervisor import Supervisor

    said: list[str] = []
    supervisor = Supervisor(_load(tmp_path, {"strategy": "multi_worker_mirrored"}), said.append)
    for record in supervisor.records.values():
        record.state, record.started_at = TaskState.RUNNING, 1.0
    supervisor.hosts["localhost"].stop = lambda tasks, **_: None
    gone = [TaskStatus(task="worker:0", pid=7, running=False, exit_code=3, uptime_s=30.0,
                       last_line="error: a worker left the collective"),
            TaskStatus(task="worker:1", pid=8, running=False, exit_code=None, uptime_s=30.0, last_line="step 20")]
    supervisor._apply(gone, asked_at=2.0)
    assert said[0].startswith("worker:1 died; restarting"), said
    assert said[1].startswith("stopped worker:0: the whole group restarts with worker:1"), said


@pytest.mark.cluster
def test_multi_worker_mirrored_heals_a_killed_worker_by_restarting_the_group(tmp_path):
    training = {"strategy": "multi_worker_mirrored", "loop": "custom", "epochs": 2, "steps_per_epoch": 60,
                "steps_per_execution": 1, "backup_every_steps": 10, "lr_decay_epochs": []}
    path, logs = _launcher_run(tmp_path, training)
    started = subprocess.run(["sh", str(ROOT / "run.sh"), "--detach", str(path)], capture_output=True, text=True,
                             timeout=120, stdin=subprocess.DEVNULL)
    assert started.returncode == 0, started.stderr
    try:
        assert wait_for_line(logs / "worker-0.log", "backup | epoch 2/2 | step 20/60", 300), \
            (logs / "launcher.log").read_text()
        record = process.PidRecord.read(logs / "worker-1.pid")
        os.killpg(record.pid, signal.SIGKILL)
        log = wait_for_launcher(logs)
    finally:
        subprocess.run(["sh", str(ROOT / "kill.sh"), str(path)], capture_output=True, timeout=180)
    assert "worker:1 died; restarting" in log and "the whole group restarts with worker:1" in log, log
    resumed = re.search(r"resuming from the backup at epoch 2, step (\d+) of 60", (logs / "worker-0.log").read_text())
    assert resumed and int(resumed[1]) >= 20, (logs / "worker-0.log").read_text()
    output = tmp_path / "output"
    summary = json.loads((output / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["strategy"] == "multi_worker_mirrored"
    assert summary["optimizer_steps"] == 120 and summary["workers"] == 2
    assert sorted(p.name for p in (output / "checkpoints").glob("*.index")) == ["ckpt-1.index", "ckpt-2.index"]
    assert not list(output.glob(".worker-*")), "worker 1's scratch copies were not removed"
    assert json.loads((output / "best_model" / "best.json").read_text())["checkpoint"].startswith("ckpt-")
    assert processes_mentioning(str(tmp_path)) == []
