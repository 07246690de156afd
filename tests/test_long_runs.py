"""Long runs on a real loopback cluster (2 workers, 2 ps): checkpoints within epochs, SIGTERM, mid-epoch resume,
resizing; the faults for the CNN and for DLRM (whose split tables and optimizer slots must survive each restore)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterkit import ROOT, assert_no_traceback, derive_cluster, wait_for_line
from modelaxis import MODELS, each_model, training as model_training
import test_coordinator
from throttling import ThrottledWorkers
from test_coordinator import run_chief

pytestmark = pytest.mark.cluster

STEPS_PER_EPOCH = 150  # the workers at a third of the time until the chief is stopped (`slowed`): as long as 450
OPTIONS = ("--epochs", "1", "--steps_per_epoch", str(STEPS_PER_EPOCH), "--steps_per_execution", "2",
           "--lr_decay_epochs", "[]", "--progress_every_s", "1")


def model_cluster(shared_servers: Path, directory: Path, model: str) -> Path:
    """The shared servers' cluster file with the model's training options (none for the CNN)."""
    return derive_cluster(shared_servers, directory, evaluator=False, training=MODELS[model])


def slowed(shared_servers: Path) -> ThrottledWorkers:
    """The shared workers at a third of the time, until the chief is stopped: an epoch as long, for a third of the
    steps (the resumed chief trains what is left at full speed)."""
    return ThrottledWorkers(str(shared_servers.parent), share=1 / 3)


def start_chief(cluster: Path, output: Path, log_path: Path, *options: str):
    return test_coordinator.start_chief(cluster, output, log_path, *OPTIONS, *options)


def stop(chief) -> int:
    try:
        return chief.wait(timeout=120)
    finally:
        chief.kill()
        chief.wait()


def checkpoint_names(output: Path) -> list[str]:
    return sorted(p.name.removesuffix(".index") for p in (output / "checkpoints").glob("ckpt-*.index"))


def resumed_from(log: str) -> tuple[str, int]:
    """The checkpoint a resumed chief named and its optimizer step."""
    match = re.search(r"resuming within epoch \d+ at step \d+ from (ckpt-[\d-]+) \(optimizer step (\d+)\)", log)
    assert match, log[-3000:]
    return match.group(1), int(match.group(2))


@each_model
def test_sigterm_writes_a_checkpoint_and_the_resume_redoes_no_step(shared_servers, tmp_path, model):
    output, log_path = tmp_path / "output", tmp_path / "chief.log"
    cluster = model_cluster(shared_servers, tmp_path, model)
    with slowed(shared_servers) as throttled:
        chief = start_chief(cluster, output, log_path, "--checkpoint_every_s", "0")
        try:
            assert wait_for_line(log_path, "train | epoch 1/1", timeout_s=300, process=chief), log_path.read_text()
            chief.send_signal(signal.SIGTERM)
            code = chief.wait(timeout=60)
        finally:
            stop(chief)
    assert len(throttled.seen) == 2, throttled.seen
    log = log_path.read_text()
    assert code == 4, log[-3000:]
    assert_no_traceback(log)
    assert "stopped as asked: checkpoint ckpt-0-" in log
    names = checkpoint_names(output)
    assert len(names) == 1 and names[0].startswith("ckpt-0-"), names  # within epoch 1: only the SIGTERM's save

    resumed = run_chief(cluster, output, *OPTIONS, "--checkpoint_every_s", "0")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    name, step = resumed_from(resumed.stderr)
    assert name == names[0] and step == int(name.split("-")[2])  # the checkpoint holds exactly the steps it names
    summary = json.loads((output / "summary.json").read_text())
    assert summary["optimizer_steps"] == STEPS_PER_EPOCH  # no step redone, none skipped

    # a chief lost after its last checkpoint, before its summary (a ps lost as the last epoch ended): the next one
    # resumes from the final checkpoint and trains nothing, yet reports the run's training time and last metrics
    (output / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    again = run_chief(cluster, output, *OPTIONS, "--checkpoint_every_s", "0")
    assert again.returncode == 0 and "resuming after epoch 1 from ckpt-1" in again.stderr, again.stderr[-3000:]
    final = json.loads((output / "summary.json").read_text())
    assert final["status"] == "complete" and final["final_metrics"] == pytest.approx(summary["final_metrics"])
    assert final["train_seconds"] >= summary["train_seconds"] > 1.0, (final, summary)


def test_a_stop_whose_drain_completes_the_epoch_saves_the_epoch_end():
    """SIGTERM near an epoch's end: the steps scheduled ahead finish it while the chief drains them, and its end
    (never reached once stopping) is the checkpoint, so the next run redoes no step (pure logic)."""
    import logging
    import types

    from coordinator.callbacks import Checkpointing
    from models.checkpoints import Position
    from common.preemption import Preempted, StopRequest

    saved, iterations = [], types.SimpleNamespace(value=50)
    optimizer = types.SimpleNamespace(iterations=types.SimpleNamespace(numpy=lambda: iterations.value))
    stop = StopRequest(logging.getLogger("test"))
    callback = Checkpointing(types.SimpleNamespace(save=saved.append), 50, stop.log, stop=stop)
    callback.set_model(types.SimpleNamespace(optimizer=optimizer))
    callback.on_epoch_begin(1)
    stop.requested_at = time.monotonic()
    iterations.value = 70
    with pytest.raises(Preempted, match=r"checkpoint ckpt-1-20 written"):
        callback.on_train_batch_end(0)
    iterations.value = 100
    with pytest.raises(Preempted, match=r"checkpoint ckpt-2 written"):
        callback.on_train_batch_end(1)
    assert saved == [Position(1, 20), Position(2)]


@each_model
def test_killed_chief_resumes_within_the_epoch(shared_servers, tmp_path, model):
    output, log_path = tmp_path / "output", tmp_path / "chief.log"
    cluster = model_cluster(shared_servers, tmp_path, model)
    with slowed(shared_servers) as throttled:
        chief = start_chief(cluster, output, log_path, "--checkpoint_every_s", "2")
        try:
            assert wait_for_line(log_path, "checkpoint ckpt-0-", timeout_s=300, process=chief), log_path.read_text()
            time.sleep(1.0)  # mid-interval: some steps after the checkpoint are lost with the chief
            chief.send_signal(signal.SIGKILL)
        finally:
            stop(chief)
    assert len(throttled.seen) == 2, throttled.seen
    first_log = log_path.read_text()
    rates = [float(m) for m in re.findall(r"\| ([\d.]+) steps/s \|", first_log)]

    resumed = run_chief(cluster, output, *OPTIONS, "--checkpoint_every_s", "2")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    name, step = resumed_from(resumed.stderr)
    assert name.startswith("ckpt-0-") and 0 < step < STEPS_PER_EPOCH  # within epoch 1, not at its start
    redone = json.loads((output / "summary.json").read_text())["optimizer_steps"] - STEPS_PER_EPOCH
    interval_steps = 2.0 * max(rates, default=STEPS_PER_EPOCH)
    assert 0 <= redone <= 1.5 * interval_steps + 4, (redone, rates)  # at most about one checkpoint interval
    assert checkpoint_names(output)[-1] == "ckpt-1"


def launch_detached(tmp_path: Path, *, training: dict, launcher: dict, workers: int = 2, ps: int = 1) -> tuple:
    from clusterkit import cluster_document, write_cluster

    logs = tmp_path / "logs"
    document = {**cluster_document(workers=workers, ps=ps, logs_dir=str(logs),
                                   training={**training, "output_dir": str(tmp_path / "output")}),
                "evaluation": {"poll_s": 0.5, "idle_timeout_s": 120}}
    document["launcher"].update(restart_backoff_s=0.5, poll_s=0.5, **launcher)
    path = write_cluster(tmp_path, document)
    started = subprocess.run(["sh", str(ROOT / "run.sh"), "--detach", str(path)], capture_output=True, text=True,
                             timeout=120, stdin=subprocess.DEVNULL)
    assert started.returncode == 0, started.stderr
    return path, logs


def test_a_worker_out_of_restarts_is_dropped_and_training_goes_on(tmp_path):
    from clusterkit import processes_mentioning, wait_for_launcher
    from test_healing import kill_task

    # 400 steps with the workers at a third of the time: on an idle machine (about 30 steps/s) training outlasts
    # the 4 s before the drop by far
    training = {"epochs": 2, "steps_per_epoch": 200, "steps_per_execution": 2, "lr_decay_epochs": [],
                "checkpoint_every_s": 3, "progress_every_s": 2}
    with ThrottledWorkers(str(tmp_path), share=1 / 3) as throttled:
        path, logs = launch_detached(tmp_path, training=training,
                                     launcher={"max_restarts": 0, "worker_lost_after_s": 4})
        try:
            assert wait_for_line(logs / "chief-0.log", "first step done", 240), (logs / "chief-0.log").read_text()
            kill_task(logs, "worker-1")
            log = wait_for_launcher(logs, timeout_s=420)
        finally:
            throttled.stop()
            subprocess.run(["sh", str(ROOT / "kill.sh"), str(path)], capture_output=True, timeout=180)
    assert len(throttled.seen) == 2, throttled.seen
    assert "worker:1 died after 0 restarts in a row (launcher.max_restarts); training goes on" in log, log[-4000:]
    assert "worker:1 lost for 4 s (launcher.worker_lost_after_s): stopping chief:0" in log, log[-4000:]
    assert "chief:0 trains with worker:0" in log
    dropped = re.search(r"workers: dropped worker:1: (training again|the restarted lead trained to the end) \d+ s", log)
    assert dropped, log[-4000:]  # the summary's membership line, with its cost (or the end, if that came first)
    chief_log = (logs / "chief-0.log").read_text()
    assert "training with worker:0 (launcher: the others are lost)" in chief_log
    assert "stopped as asked: checkpoint ckpt-" in chief_log  # the restart for the new membership lost no work
    summary = json.loads((tmp_path / "output" / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["global_batch"] == 64  # the batch of the 2 it started with
    assert processes_mentioning(str(tmp_path)) == []


def reload_with(path: Path, **jobs) -> subprocess.CompletedProcess:
    """Rewrites the cluster file's job lists in place and runs `sh run.sh reload` on it."""
    document = json.loads(path.read_text())
    for job, addresses in jobs.items():
        document["cluster"][job] = addresses
    path.write_text(json.dumps(document, indent=2))
    return subprocess.run(["sh", str(ROOT / "run.sh"), "reload", str(path)], capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL)


def wait_for_count(path: Path, text: str, count: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text(errors="replace").count(text) >= count:
            return True
        time.sleep(0.2)
    return False


def _supervisor(tmp_path, say):
    """A supervisor of the default loopback cluster (no evaluator), nothing started: for its pure logic."""
    from clusterkit import cluster_document, write_cluster

    from cluster import config as cluster_config
    from launcher.supervisor import Supervisor

    return Supervisor(cluster_config.load(write_cluster(tmp_path, cluster_document(evaluator=False))), say)


def test_a_status_answer_naming_a_task_a_reload_took_out_is_ignored(tmp_path):
    """Remote hosts answer status in the background: an answer asked before a shrink names tasks that left."""
    from launcher.backends.base import TaskStatus

    supervisor = _supervisor(tmp_path, print)
    asked_at = time.monotonic()
    del supervisor.records["worker:1"]  # what `reload.apply` does for a worker the edited file leaves out
    rows = [TaskStatus(task=name, pid=1, running=False, exit_code=4, uptime_s=1.0, last_line="")
            for name in ("worker:0", "worker:1")]
    supervisor._apply(rows, asked_at)
    assert supervisor.records["worker:0"].exit_code == 4 and "worker:1" not in supervisor.records


def test_a_worker_host_back_before_the_step_moved_is_timed_until_training_again(tmp_path):
    """A short cut can end before TensorFlow has worked around the lost worker: no claim that training went on."""
    from launcher.records import TaskState

    said: list[str] = []
    supervisor = _supervisor(tmp_path, said.append)
    lead, worker = supervisor.lead, supervisor.records["worker:1"]
    lead.state, lead.step, lead.last_step, worker.state = TaskState.RUNNING, 160, 160, TaskState.RUNNING
    supervisor.outages.lost("10.0.0.2", [worker], "")
    supervisor.outages.answered("10.0.0.2")
    assert said[-1].endswith("chief:0's step has not moved since the loss (160)"), said
    lead.step, lead.last_step, lead.step_changed_at = 161, 161, time.monotonic()
    supervisor.outages.tick(time.monotonic())
    assert re.match(r"training again \d+ s after 10\.0\.0\.2 answered again \(chief:0 at step 161\)", said[-1]), said


def test_a_cut_whose_loss_and_return_fall_between_epochs_still_says_training_went_on(tmp_path):
    """The lead reports no step at an epoch's end (CI, 2026-11-28: a 60 s cut ended as a bare "answers again"):
    the step it last reported stands for it."""
    from launcher.backends.base import TaskStatus
    from launcher.records import TaskState

    said: list[str] = []
    supervisor = _supervisor(tmp_path, said.append)
    lead, worker = supervisor.lead, supervisor.records["worker:1"]
    lead.state, worker.state = TaskState.RUNNING, TaskState.RUNNING

    def lead_reports(*steps):
        for step in steps:
            supervisor._update(lead, TaskStatus(task=lead.name, pid=1, running=True, exit_code=None, uptime_s=1.0,
                                                last_line="", step=step))

    lead_reports(160, None)
    supervisor.outages.lost("10.0.0.2", [worker], "")
    lead_reports(200, None)
    supervisor.outages.answered("10.0.0.2")
    assert said[-1].endswith("training went on meanwhile (step 160 at the loss, 200 now)"), said


def test_a_lead_held_for_ps_alone_closes_no_connection_when_they_answer(tmp_path):
    """An elastic run drops its lost workers from what a held lead waits for: with nothing left to reconnect, no
    host is asked (CI, 2026-11-28: an agent call with no peer failed, and its error was logged)."""
    supervisor = _supervisor(tmp_path, print)
    asked: list[list[str]] = []
    for host in supervisor.hosts.values():
        host.drop_connections = lambda peers: asked.append(peers) or 0
    supervisor.outages.reconnect([])
    assert asked == []
    empty = subprocess.run([sys.executable, "-m", "launcher.agent", "drop_connections", "--cluster", "unread",
                            "--peers", ""], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert empty.returncode == 0 and empty.stdout.strip() == "0", empty.stderr


def test_reload_resizes_workers_and_ps_in_a_running_job(tmp_path):
    """2 -> 3 -> 1 ps while dlrm with dynamic tables trains: each change keeps the predictions (dense layers, and
    every held id's row, slots and last step: the tables spread their ids again); the evaluator reads the
    checkpoints meanwhile. The CNN's reshard is tests/test_slurm.py's reload (and tests/test_firewall.py's)."""
    from clusterkit import free_ports, processes_mentioning, wait_for_launcher

    model = "dlrm_dynamic"
    # outlasts the two changes (alone they were done by steps 134 and 182 of 800 at full speed), then the shrunk
    # job trains the rest: 300 steps with the workers at a third of the time, as long as 900 were
    training = model_training(model, epochs=2, steps_per_epoch=150, steps_per_execution=2, lr_decay_epochs=[],
                              progress_every_s=2)
    throttled = ThrottledWorkers(str(tmp_path), share=1 / 3).start()
    path, logs = launch_detached(tmp_path, training=training, launcher={}, workers=2, ps=2)
    chief_log = logs / "chief-0.log"
    try:
        assert wait_for_line(chief_log, "train | epoch 1/2", 240), chief_log.read_text()
        original = json.loads(path.read_text())
        changed = json.loads(path.read_text())
        changed["training"]["seed"] = 1  # a change that cannot be applied live: refused, nothing changes
        path.write_text(json.dumps(changed))
        refused = subprocess.run(["sh", str(ROOT / "run.sh"), "reload", str(path)], capture_output=True, text=True,
                                 timeout=600, stdin=subprocess.DEVNULL)
        path.write_text(json.dumps(original))  # first: kill.sh in `finally` reads this file
        assert refused.returncode == 2, refused.stderr
        assert "training.seed = 1: cannot change in a running job (it is 0)" in refused.stderr

        new_worker, new_ps = (f"localhost:{port}" for port in free_ports(2))
        grown = reload_with(path, worker=[*original["cluster"]["worker"], new_worker],
                            ps=[*original["cluster"]["ps"], new_ps])
        assert grown.returncode == 0, grown.stderr
        assert "chief:0 starts again with 3 worker(s) and 3 ps" in grown.stderr
        assert wait_for_line(chief_log, "ps 2 -> 3:", 300), chief_log.read_text()[-3000:]
        assert wait_for_count(chief_log, "train | epoch", 2 + chief_log.read_text().count("train | epoch"), 300)

        shrunk = reload_with(path, worker=original["cluster"]["worker"][:1], ps=original["cluster"]["ps"][:1])
        assert shrunk.returncode == 0, shrunk.stderr
        assert "worker:1 at " in shrunk.stderr and "ps:2 at " in shrunk.stderr  # stopped after the chief let go
        assert wait_for_line(chief_log, "ps 3 -> 1:", 300), chief_log.read_text()[-3000:]
        launcher_log = wait_for_launcher(logs, timeout_s=600)
    finally:
        throttled.stop()
        subprocess.run(["sh", str(ROOT / "kill.sh"), str(path)], capture_output=True, timeout=180)
    assert len(throttled.seen) >= 3, throttled.seen  # the 2 workers, and the one added
    log = chief_log.read_text()
    differences = [float(x) for x in re.findall(r"predictions before and after differ by at most ([\d.e+-]+)", log)]
    assert len(differences) == 2 and all(d <= 1e-6 for d in differences), differences
    assert "optimizer slots" in log
    spread = re.findall(r"table embeddings: (\d+) ids spread again over (\d+) partitions; .* at most ([\d.e+-]+)", log)
    assert [int(parts) for _, parts, _ in spread] == [3, 1], spread
    assert all(int(ids) > 0 and float(differ) == 0.0 for ids, _, differ in spread)  # each held id kept its row
    assert log.count("stopped as asked: checkpoint") == 2  # each change began with a checkpoint, losing no step
    summary = json.loads((tmp_path / "output" / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["ps"] == 1, launcher_log[-3000:]
    assert summary["ps_report"].get("ps:0", {}).get("ids_held", 0) > 0 and "export check" in log
    best = json.loads((tmp_path / "output" / "best_model" / "best.json").read_text())  # the evaluator read them
    assert 0.0 <= best["metrics"][best["best_metric"]] <= 1.0
    assert processes_mentioning(str(tmp_path)) == []
