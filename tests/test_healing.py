"""Faults on a schedule against the launcher on loopback: a lost worker, ps or chief heals and the run completes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from clusterkit import (ROOT, cluster_document, processes_mentioning, wait_for_launcher, wait_for_line, wait_until,
                        write_cluster)
from cluster.config import load as load_config
from cluster.run_files import Phase, RunFiles, read_progress
from common import net
from launcher import process
from throttling import ThrottledWorkers

pytestmark = pytest.mark.cluster

EPOCHS = 3
SLOW_EPOCHS = {"epochs": EPOCHS, "steps_per_epoch": 100, "steps_per_execution": 1, "lr_decay_epochs": []}
DYNAMIC_DLRM = {"model": "dlrm", "dataset": "synthetic_criteo", "table_rows": 64, "embedding_dim": 4, "bottom_mlp": [8],
                "top_mlp": [8], "per_worker_batch": 32, "synthetic_examples": 1024, "min_shard_bytes": 256,
                "embedding_kind": "dynamic", "embedding_capacity": 4000}


@pytest.fixture
def detached_run(tmp_path, request):
    """Starts `sh run.sh --detach` on a fresh loopback cluster (the CNN, or the training options the test gives as
    the fixture's parameter); yields helpers; always ends with kill.sh."""
    logs = tmp_path / "logs"
    training = {**SLOW_EPOCHS, **getattr(request, "param", {}), "output_dir": str(tmp_path / "output")}
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


@pytest.mark.parametrize("detached_run", [DYNAMIC_DLRM], indirect=True, ids=["dlrm with dynamic tables"])
def test_killed_ps_restarts_ps_and_chief_losing_at_most_an_epoch(detached_run, tmp_path):
    """The lost ps held a partition of each dynamic table (its index, rows and slots): all come back from ckpt-1."""
    path, logs = detached_run
    assert wait_for_line(logs / "chief-0.log", f"train | epoch 1/{EPOCHS}", 240)  # now in epoch 2
    kill_task(logs, "ps-0")
    log = wait_for_launcher(logs)
    assert "every ps answer again: starting chief:0 again" in log, log  # held, whichever exit was seen first
    chief_log = (logs / "chief-0.log").read_text()
    assert "resuming after epoch 1 from ckpt-1 (optimizer step 100)" in chief_log  # ckpt-1: epoch 2's work was redone
    summary = completed_summary(tmp_path)
    assert summary["optimizer_steps"] == 300
    assert "export check: largest difference between trained and exported predictions" in chief_log
    assert all(summary["ps_report"][ps]["ids_held"] > 0 for ps in ("ps:0", "ps:1"))
    assert processes_mentioning(str(path)) == []


def test_user_error_is_not_restarted(tmp_path):
    """A model function that returns no model: only the chief can find out (preflight checks it exists)."""
    (tmp_path / "not_models.py").write_text("def build():\n    return 3\n")
    training = {"model": "not_models:build", "output_dir": str(tmp_path / "output")}
    path = write_cluster(tmp_path, cluster_document(evaluator=False, logs_dir=str(tmp_path / "logs"),
                                                    training=training))
    result = subprocess.run(["sh", str(ROOT / "run.sh"), str(path)], capture_output=True, text=True, timeout=300,
                            stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert result.returncode == 2  # as the chief's: a user error, docs/running.md's table of endings
    assert "run failed: chief:0 exited with code 2 (a user error; not restarted)" in result.stderr
    assert "training.model = 'not_models:build': returned int, not a tf_keras model" in result.stderr
    assert processes_mentioning(str(path)) == []


def _foreground_run(tmp_path, training: dict, evaluation: dict | None = None,
                    **launcher) -> tuple[Path, subprocess.Popen]:
    """A run in the foreground on 1 worker and 1 ps: its tests watch the chief and the evaluator, and each more
    server costs every step some RPCs (a third more CPU with 2 and 2)."""
    document = cluster_document(workers=1, ps=1, evaluator=evaluation is not None, logs_dir=str(tmp_path / "logs"),
                                training={**training, "output_dir": str(tmp_path / "o")})
    document["launcher"].update(restart_backoff_s=0.5, poll_s=0.5, **launcher)
    document["evaluation"] = evaluation or {}
    path = write_cluster(tmp_path, document)
    return path, subprocess.Popen(["sh", str(ROOT / "run.sh"), str(path)], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_an_epoch_longer_than_the_timeouts_that_advances_is_never_restarted(tmp_path):
    """Issue 18: Keras scheduled a whole epoch at once and waited for it with no batch hook, so no heartbeat was
    written after its first few dozen steps and the watchdog restarted the chief; an epoch outliving the stall
    and idle timeouts must show progress all along, its second half included."""
    steps = 400  # with the workers at a third of the time, some 14 s on an idle machine: twice both timeouts
    training = {"epochs": 1, "steps_per_epoch": steps, "steps_per_execution": 1, "progress_every_s": 2}
    with ThrottledWorkers(str(tmp_path), share=1 / 3) as throttled:  # the epoch's length, for a third of the steps
        path, run = _foreground_run(tmp_path, training, {"poll_s": 0.5, "idle_timeout_s": 7}, stall_timeout_s=6)
        output = run.communicate(timeout=600)[1]
    assert throttled.seen  # its one worker
    assert run.returncode == 0, output[-3000:]
    assert "stall" not in output and "restarting" not in output, output[-3000:]
    assert output.count("chief:0 started") == 1, output[-3000:]
    assert "evaluator:0 finished" in output  # no checkpoint for longer than its idle timeout, yet it waited
    shown = [int(step) for step in re.findall(r"train \| epoch 1/1 \| step (\d+)/", output)]
    assert len(shown) >= 3, output[-3000:]  # lines during the epoch, then its last one
    assert [step for step in shown if steps // 2 <= step < steps], f"no progress line in the epoch's second half " \
        f"(steps shown: {shown}): batch hooks stopped once Keras had scheduled the epoch"
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["train_seconds"] > 7 and summary["optimizer_steps"] == steps  # it outlived both timeouts
    assert processes_mentioning(str(path)) == []


def test_a_frozen_chief_is_detected_restarted_and_the_run_completes(tmp_path):
    training = {"epochs": 2, "steps_per_epoch": 250, "steps_per_execution": 1}  # frozen some 230 steps in at most
    path, run = _foreground_run(tmp_path, training, stall_timeout_s=6)
    try:
        assert wait_for_line(tmp_path / "logs" / "chief-0.log", "first step done", 240, process=run)
        frozen = process.PidRecord.read(tmp_path / "logs" / "chief-0.pid")
        deadline = time.monotonic() + 60
        while not _training_beat(tmp_path / "o", frozen.pid):  # frozen at once: long before the epochs' end
            assert time.monotonic() < deadline and run.poll() is None
            time.sleep(0.05)
        os.kill(frozen.pid, signal.SIGSTOP)
        output = run.communicate(timeout=600)[1]
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, output[-3000:]
    assert "stall: chief:0's optimizer step has not advanced from" in output, output[-3000:]
    assert "chief:0 finished" in output
    assert not process.is_running(frozen)
    assert processes_mentioning(str(path)) == []


def _training_beat(output, pid: int) -> bool:
    """Whether `pid`'s heartbeat says it trains past a step (what the launcher judges a stall by)."""
    beat = read_progress(RunFiles(output))
    return bool(beat and beat.pid == pid and beat.phase == Phase.TRAIN and beat.step >= 1)


def _listening(ports: list[int]) -> list[int]:
    return [port for port in ports if net.answers("localhost", port)]


def test_sigkill_of_the_pid_status_shows_heals_and_leaves_no_orphan(detached_run, tmp_path):
    path, logs = detached_run
    assert wait_for_line(logs / "chief-0.log", f"train | epoch 1/{EPOCHS}", 240)
    seen = [""]

    def shows_every_task_and_the_rate() -> bool:  # once the launcher wrote a status since the epoch's first line
        seen[0] = subprocess.run(["sh", str(ROOT / "run.sh"), "status", str(path)], capture_output=True, text=True,
                                 timeout=120).stdout
        return bool(re.search(rf"^epoch \d+/{EPOCHS} \| step \d+/{EPOCHS * 100} \| steps per s", seen[0], re.M))

    wait_until(shows_every_task_and_the_rate, 60, poll_s=1)
    status = seen[0]
    assert status.startswith("running for "), status
    for name in ("chief:0", "worker:0", "worker:1", "ps:0", "ps:1", "evaluator:0"):
        assert any(line.startswith(name) and " running " in line for line in status.splitlines()), status
    assert re.search(rf"^epoch \d+/{EPOCHS} \| step \d+/{EPOCHS * 100} \| steps per s [\d.]+", status, re.M), status
    shown = int(next(line for line in status.splitlines() if line.startswith("worker:1")).split()[2])
    os.kill(shown, signal.SIGKILL)  # exactly what a user would do
    log = wait_for_launcher(logs)
    assert "worker:1 died; restarting" in log, log
    assert "tasks: chief:0 exited" in log
    status = json.loads((logs / "status.json").read_text())
    assert {row["task"]: row["restarts"] for row in status["tasks"]}["worker:1"] == 1
    summary = completed_summary(tmp_path)
    assert 300 <= summary["optimizer_steps"] <= 300 + 1  # at-least-once: up to steps_per_execution per failure
    ports = [int(a.split(":")[1]) for job in ("worker", "ps") for a in json.loads(path.read_text())["cluster"][job]]
    assert processes_mentioning(str(path)) == [] and _listening(ports) == []


def test_kill_sh_cleans_up_after_a_launcher_killed_with_sigkill(detached_run, tmp_path):
    path, logs = detached_run
    assert wait_for_line(logs / "chief-0.log", f"train | epoch 1/{EPOCHS}", 240)
    launcher = process.PidRecord.read(logs / "launcher.pid")
    os.kill(launcher.pid, signal.SIGKILL)
    time.sleep(1.0)
    assert processes_mentioning(str(path)), "the tasks should outlive their launcher until kill.sh"
    down = subprocess.run(["sh", str(ROOT / "kill.sh"), str(path)], capture_output=True, text=True, timeout=180)
    assert down.returncode == 0 and ": stopped" in down.stderr, down.stderr
    ports = [int(a.split(":")[1]) for job in ("worker", "ps") for a in json.loads(path.read_text())["cluster"][job]]
    assert processes_mentioning(str(path)) == [] and _listening(ports) == []


class HostThatFails:
    """A host that went away between its status answer and the launcher's next action on it (pure logic)."""

    is_remote = True

    def __init__(self, error: Exception):
        self.error = error

    def start(self, tasks):
        raise self.error

    def ending(self):
        return None


def test_a_host_failing_mid_heal_delays_healing_with_one_line_or_ends_the_run_with_its_error(tmp_path):
    from launcher.backends.base import AgentFailed, HostUnreachable
    from launcher.records import RunFailed, TaskState
    from launcher.supervisor import Supervisor

    said: list[str] = []
    supervisor = Supervisor(load_config(write_cluster(tmp_path, cluster_document(evaluator=False))), said.append)
    worker = supervisor.records["worker:0"]
    worker.state, worker.restart_at = TaskState.RESTARTING, 0.0
    supervisor.hosts[worker.host] = HostThatFails(HostUnreachable("10.0.0.2: ssh: connect timed out"))
    for _ in range(3):
        supervisor._heal_unless_a_host_fails()
    assert said == ["healing waits for a host: 10.0.0.2: ssh: connect timed out"], said
    assert worker.state == TaskState.RESTARTING  # started once the host answers again
    supervisor.hosts[worker.host] = HostThatFails(AgentFailed("10.0.0.2: .venv/bin/python: not found"))
    with pytest.raises(RunFailed, match="python: not found"):
        supervisor._heal_unless_a_host_fails()


def test_a_lead_stopped_when_its_allocation_nears_its_end_is_not_started_again_there(tmp_path):
    """After Slurm's time-limit warning (Backend.ending) the chief checkpoints and exits 4; started again it would
    be killed at the limit, losing its steps since the checkpoint, so it waits for the job's end and the next run
    resumes (pure logic; the run against a real Slurm is in test_slurm_endings)."""
    from cluster import config as cluster_config
    from launcher.records import TaskState
    from launcher.status import shown_state
    from launcher.supervisor import Supervisor

    said, started = [], []
    supervisor = Supervisor(cluster_config.load(write_cluster(tmp_path, cluster_document(evaluator=False))),
                            said.append)
    supervisor.start_now = started.extend
    for record in supervisor.records.values():
        record.state, record.started_at = TaskState.RUNNING, 1.0
    lead, host = supervisor.lead, supervisor.hosts[supervisor.lead.host]
    host.ending = lambda: "job 7's time limit is near (slurm.signal_before_end_s)"
    supervisor._exited(lead, 4)
    supervisor._heal()
    assert said[-1] == ("chief:0 was stopped from outside the launcher (SIGTERM) and wrote a checkpoint; job 7's "
                        "time limit is near (slurm.signal_before_end_s): it is not started again in this job, and "
                        "the next `sh run.sh` resumes there")
    assert started == [] and lead.restarts == 0 and shown_state(lead, finished=False) == "held"
    lead.restart_at = 0.0  # e.g. a crash's backoff over, or a hold for a ps ended: not started either
    supervisor._heal()
    assert started == [] and said[-1].startswith("chief:0 is not started again: job 7's time limit is near")
    host.ending = lambda: None  # without the warning a SIGTERM from outside restarts it, uncounted
    lead.state = TaskState.RUNNING
    supervisor._exited(lead, 4)
    supervisor._heal()  # the ps first: the dead chief's tables would stay on live ones beside the new chief's
    assert [r.name for r in started] == ["ps:0", "ps:1"] and said[-1].startswith("stopped ps:0, ps:1: they start")
    for record in started:
        record.state = TaskState.RUNNING
    supervisor._heal()
    assert started[-1] is lead and lead.restarts == 0 and said[-1] == "every ps answer again: starting chief:0 again"
