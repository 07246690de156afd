"""A slow worker's piece, given to the other worker as well, whose closure TensorFlow queues once more when the slow
worker is then SIGKILLed: the piece trains in full again, and that is counted (follow.steps_trained_again), every
file once, nothing lost, the run goes on (issue 59, item 2, on real servers; the pure logic is in
test_abandoned_closures.py). And a worker frozen while its values are freed holds no other worker's closures."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from clusterkit import PYTHON, ROOT, cluster_document, wait_for_launcher, wait_for_line, write_cluster
from cluster import config as cluster_config
from launcher import process
from launcher.supervisor import Supervisor
from test_follow import FOLLOW, write_day

pytestmark = pytest.mark.cluster

FILES = {f"day_{i}": 3000 for i in range(6)}  # 23 pieces each, of about 5 steps

# The chief's strategy as coordinator.train builds it; 40 closures return values kept on both workers, then worker 1
# is stopped and they are dropped: freeing worker 1's values waits on it for ever, and 30 more closures must train
# on worker 0 all the same (coordinator/closure_scope.py; before it, the run stood still after one).
FROZEN_WHILE_FREED = """
import gc, os, signal, sys, time
import tensorflow as tf
from cluster import config as cluster_config
from coordinator import strategy
config = cluster_config.load(sys.argv[1])
distribution = strategy.build(config, config.training)
coordinator = tf.distribute.coordinator.ClusterCoordinator(distribution)
with distribution.scope():
    steps = tf.Variable(0.0)

@tf.function
def step():
    steps.assign_add(1.0)
    return tf.distribute.coordinator.experimental_get_current_worker_index()

kept = [coordinator.schedule(step) for _ in range(40)]
coordinator.join()
print("ran on workers", sorted({int(value.fetch()) for value in kept}), flush=True)
os.killpg(int(sys.argv[2]), signal.SIGSTOP)
del kept
gc.collect()
before = float(steps.numpy())
for _ in range(30):
    coordinator.schedule(step)
for _ in range(240):  # up to 60 s
    trained = float(steps.numpy()) - before
    if trained >= 20:
        break
    time.sleep(0.25)
print("steps after the stop:", trained, flush=True)
os._exit(0)  # a closure waits on the stopped worker: nothing to join
"""


def test_a_slow_worker_killed_while_its_abandoned_piece_runs_costs_a_counted_piece(tmp_path):
    data, logs, output = tmp_path / "data", tmp_path / "logs", tmp_path / "output"
    data.mkdir()
    for i, (name, count) in enumerate(FILES.items()):
        write_day(data, name, count, count * i)
    training = {**FOLLOW, "data_dir": str(data), "output_dir": str(output), "straggler_after_s": 0.5,
                "stop_when_idle_s": 6, "checkpoint_every_s": 2}
    document = cluster_document(workers=2, ps=1, evaluator=False, logs_dir=str(logs), training=training)
    document["launcher"].update(restart_backoff_s=0.5, poll_s=0.5)
    path = write_cluster(tmp_path, document)
    chief_log, worker = logs / "chief-0.log", None
    try:
        started = subprocess.run(["sh", str(ROOT / "run.sh"), "--detach", str(path)], capture_output=True, text=True,
                                 timeout=120, stdin=subprocess.DEVNULL)
        assert started.returncode == 0, started.stderr
        for written in ("checkpoint ckpt-", ") for a serving version: "):  # TensorFlow traces each saver at its first
            assert wait_for_line(chief_log, written, 240), _tail(chief_log)  # save, waiting for every worker
        worker = process.PidRecord.read(logs / "worker-1.pid").pid
        before = len(chief_log.read_text())
        os.killpg(worker, signal.SIGSTOP)  # slow: its running piece goes to worker 0 as well
        given_twice = _wait_for(chief_log, before, r"(day_\d+): a piece .* given to another worker as well",
                                stacks_of=process.PidRecord.read(logs / "chief-0.pid").pid)
        assert wait_for_line(chief_log, f"{given_twice}: done", 120), _tail(chief_log)  # worker 0's closure won
        os.killpg(worker, signal.SIGKILL)  # then lost: TensorFlow queues its abandoned closure once more
        launcher_log = wait_for_launcher(logs, timeout_s=420)
    finally:
        if worker is not None:
            _continue(worker)
        subprocess.run(["sh", str(ROOT / "kill.sh"), str(path)], capture_output=True, timeout=180)
    summary = json.loads((output / "summary.json").read_text())
    follow = summary["follow"]
    assert summary["status"] == "complete", launcher_log[-3000:]
    assert (follow["files_done"], follow["examples"]) == (len(FILES), sum(FILES.values())), follow
    assert follow["problems"]["lost_files"] == 0, follow["problems"]
    assert follow["steps_trained_again"] > 0, follow  # the abandoned closure ran in full again: counted
    counted = follow["steps"] + follow["steps_trained_again"]  # the killed attempt's steps before its SIGSTOP stay
    assert counted <= summary["optimizer_steps"] <= counted + follow["steps_trained_again"], (  # uncounted
        summary["optimizer_steps"], follow, _tail(chief_log))
    assert "worker:1 died" in launcher_log or "worker:1 exited" in launcher_log, launcher_log[-3000:]


def test_a_worker_stopped_while_its_values_are_freed_holds_no_other_worker(tmp_path):
    document = cluster_document(workers=2, ps=1, evaluator=False, logs_dir=str(tmp_path / "logs"))
    path = write_cluster(tmp_path, document)
    supervisor, worker = Supervisor(cluster_config.load(path), print), None
    try:
        supervisor.start_servers()
        worker = process.PidRecord.read(tmp_path / "logs" / "worker-1.pid").pid
        env = {**os.environ, "TF_CONFIG": json.dumps({"cluster": document["cluster"],
                                                      "task": {"type": "chief", "index": 0}}),
               "GRPC_FAIL_FAST": "use_caller", "TF_CPP_MIN_LOG_LEVEL": "2"}
        with open(tmp_path / "chief.log", "w") as log:
            chief = subprocess.run([PYTHON, "-c", FROZEN_WHILE_FREED, str(path), str(worker)], cwd=ROOT, env=env,
                                   stdout=subprocess.PIPE, stderr=log, text=True, timeout=180,
                                   stdin=subprocess.DEVNULL)
    finally:
        if worker is not None:
            _continue(worker)
        supervisor.stop_everything()
    assert chief.returncode == 0, (tmp_path / "chief.log").read_text()[-3000:]
    assert "ran on workers [0, 1]" in chief.stdout, chief.stdout
    assert float(chief.stdout.split("steps after the stop:")[1]) >= 20, chief.stdout


def _wait_for(log, after: int, pattern: str, timeout_s: float = 120, stacks_of: int | None = None) -> str:
    """The first group of `pattern` in the log past character `after`, waited for; when it does not come, the
    task `stacks_of` writes its threads' stacks to the log first (common/stack_dump.py), to show where it waits."""
    for _ in range(int(timeout_s / 0.2)):
        found = re.search(pattern, log.read_text(errors="replace")[after:])
        if found:
            return found.group(1)
        time.sleep(0.2)
    if stacks_of is not None:
        os.kill(stacks_of, signal.SIGUSR1)
        _wait_for_the_whole_dump(log)
        raise AssertionError(f"no {pattern!r} in the log; the chief's threads then:\n"
                             f"{log.read_text(errors='replace')[-40000:]}")
    raise AssertionError(f"no {pattern!r} in {_tail(log)}")


def _wait_for_the_whole_dump(log, timeout_s: float = 10) -> None:
    """Until the stack dump SIGUSR1 asked for stopped growing: faulthandler writes one thread after another."""
    assert wait_for_line(log, "(most recent call first)", timeout_s), _tail(log)
    size = -1
    for _ in range(int(timeout_s / 0.5)):
        if log.stat().st_size == size:
            return
        size = log.stat().st_size
        time.sleep(0.5)


def _continue(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def _tail(log) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
