"""run.sh and kill.sh as a user runs them: the job runs to an exported model, and nothing is left behind."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from clusterkit import ROOT, cluster_document, processes_mentioning, run_module, wait_for_line, write_cluster
from cluster import config as cluster_config
from common import net

pytestmark = pytest.mark.cluster


def sh(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(ROOT / script), *args], capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)


def test_up_then_kill_leaves_nothing(tmp_path):
    path = write_cluster(tmp_path, cluster_document(logs_dir=str(tmp_path / "logs")))
    servers = cluster_config.load(path).tasks(("ps", "worker"))
    up = run_module("roles.launch", "up", str(path))
    try:
        assert up.returncode == 0, up.stderr
        assert "ready: ps:0, ps:1, worker:0, worker:1" in up.stderr
        assert net.wait_until_listening(servers, timeout_s=5) == []
        assert sorted(p.name for p in (tmp_path / "logs").glob("*.pid")) == [
            "ps-0.pid", "ps-1.pid", "worker-0.pid", "worker-1.pid"]
        shutil.rmtree(tmp_path / "logs")  # pid files gone: each task is found by the exit file its environment names
    finally:
        down = sh("kill.sh", str(path))  # whatever failed above, the servers are stopped
    assert down.returncode == 0, down.stderr
    assert down.stderr.count(": stopped") == 4, down.stderr
    assert processes_mentioning(str(path)) == []
    assert [t for t in servers if net.answers(t.address.host, t.address.port)] == []

    again = sh("kill.sh", str(path))
    assert again.returncode == 0 and "nothing to stop" in again.stderr


def test_kill_sh_finds_a_detached_run_whose_logs_folder_was_deleted(tmp_path):
    training = {"epochs": 20, "steps_per_epoch": 100, "steps_per_execution": 1, "output_dir": str(tmp_path / "out")}
    path = write_cluster(tmp_path, cluster_document(logs_dir=str(tmp_path / "logs"), training=training))
    servers = cluster_config.load(path).tasks(("ps", "worker"))
    started = sh("run.sh", "--detach", str(path))
    try:
        assert started.returncode == 0, started.stderr
        assert wait_for_line(tmp_path / "logs" / "launcher.log", "evaluator:0 started", 240)
        aside = tmp_path / "logs-deleted"  # moved in one step: the launcher may write its status into it meanwhile
        (tmp_path / "logs").rename(aside)  # launcher.pid and every task's pid file with it
        for _ in range(50):  # a status write begun before the move may still land in it
            shutil.rmtree(aside, ignore_errors=True)
            if not aside.exists():
                break
            time.sleep(0.1)
        assert not aside.exists()
    finally:
        down = sh("kill.sh", str(path))
    assert down.returncode == 0, down.stderr
    assert re.search(r"launcher \(pid \d+\): stopped", down.stderr), down.stderr  # found by its command line
    assert "nothing to stop" not in down.stderr
    assert processes_mentioning(str(tmp_path)) == []  # the six tasks too (the launcher stopped them as it ended)
    assert [t for t in servers if net.answers(t.address.host, t.address.port)] == []


def test_the_search_finds_only_this_clusters_processes(tmp_path):
    """By the exact exit file in the environment, by the cluster file a launcher's command line names (read from
    its working directory), never by a process's name."""
    from launcher import process_search

    ours, theirs = tmp_path / "logs" / "chief-0.exit", tmp_path / "other" / "chief-0.exit"
    sleep = [sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path)]

    def started(exit_file, arguments=sleep, cwd=None):
        return subprocess.Popen(arguments, env={**os.environ, "PSCLUSTER_EXIT_FILE": str(exit_file)}, cwd=cwd,
                                start_new_session=True)

    mine, other, twin = started(ours), started(theirs), started(str(ours) + ".old")
    (tmp_path / "project").mkdir()
    write_cluster(tmp_path / "project", cluster_document())
    launcher = started(theirs, [*sleep[:3], "-m", "roles.launch", "run", "cluster.json"], cwd=tmp_path / "project")
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not process_search.launchers(tmp_path / "project" / "cluster.json"):
            time.sleep(0.05)
        assert [r.pid for r in process_search.task_groups(ours)] == [mine.pid]
        assert [r.group for r in process_search.task_groups(ours)] == [mine.pid]  # its session: stopped whole
        assert [r.pid for r in process_search.launchers(tmp_path / "project" / "cluster.json")] == [launcher.pid]
        assert process_search.launchers(tmp_path / "cluster.json") == []  # another file of the same name
    finally:
        for child in (mine, other, twin, launcher):
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    assert process_search.task_groups(ours) == []


def test_run_sh_trains_evaluates_and_exports(tmp_path):
    training = {"epochs": 2, "lr_decay_epochs": [], "output_dir": str(tmp_path / "output")}
    document = cluster_document(logs_dir=str(tmp_path / "logs"), training=training)
    path = write_cluster(tmp_path, {**document, "evaluation": {"poll_s": 0.5}})
    result = sh("run.sh", str(path))
    assert result.returncode == 0, result.stderr[-4000:]
    assert "[chief:0]" in result.stderr and "train | epoch 2/2" in result.stderr
    assert "[evaluator:0]" in result.stderr and "eval | ckpt-2" in result.stderr
    summary = json.loads((tmp_path / "output" / "summary.json").read_text())
    assert summary["status"] == "complete"
    assert (tmp_path / "output" / "model" / "model.h5").exists()
    assert (tmp_path / "output" / "best_model" / "best.json").exists()
    assert "best: ckpt-" in result.stderr and "tensorboard --logdir" in result.stderr
    assert processes_mentioning(str(path)) == []
    assert "nothing to stop" in sh("kill.sh", str(path)).stderr


def test_kill_sh_stops_a_detached_launcher_and_its_tasks_and_status_then_says_finished(tmp_path):
    """(`sh run.sh status` of a detached run in training: tests/test_healing.py's status-then-SIGKILL test.)"""
    training = {"epochs": 20, "steps_per_epoch": 100, "steps_per_execution": 1, "output_dir": str(tmp_path / "out")}
    path = write_cluster(tmp_path, cluster_document(logs_dir=str(tmp_path / "logs"), training=training))
    servers = cluster_config.load(path).tasks(("ps", "worker"))
    started = sh("run.sh", "--detach", str(path))
    assert started.returncode == 0 and "running in the background" in started.stderr, started.stderr
    try:
        assert wait_for_line(tmp_path / "logs" / "launcher.log", "evaluator:0 started", 240)
    finally:
        down = sh("kill.sh", str(path))
    assert down.returncode == 0, down.stderr
    assert "launcher (pid" in down.stderr
    assert processes_mentioning(str(path)) == []
    assert [t for t in servers if net.answers(t.address.host, t.address.port)] == []
    assert sh("run.sh", "status", str(path)).stdout.startswith("run finished")


def test_data_mistake_stops_run_sh_before_any_task_starts(tmp_path):
    training = {"dataset": "cifar10", "data_dir": str(tmp_path / "no-such-dir")}
    path = write_cluster(tmp_path, cluster_document(logs_dir=str(tmp_path / "logs"), training=training))
    result = sh("run.sh", str(path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert str(tmp_path / "no-such-dir") in result.stderr and "error:" in result.stderr
    assert not (tmp_path / "logs").exists() or not list((tmp_path / "logs").glob("*.pid"))


def test_kill_sh_stops_a_foreground_run_without_it_healing_anything(tmp_path):
    training = {"epochs": 20, "steps_per_epoch": 100, "steps_per_execution": 1, "output_dir": str(tmp_path / "out")}
    path = write_cluster(tmp_path, cluster_document(logs_dir=str(tmp_path / "logs"), training=training))
    foreground = subprocess.Popen(["sh", str(ROOT / "run.sh"), str(path)], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for_line(tmp_path / "logs" / "chief-0.log", "train | epoch 1/20", 240, process=foreground)
        down = sh("kill.sh", str(path))
        assert down.returncode == 0, down.stderr
        assert "launcher (pid" in down.stderr, down.stderr
        output = foreground.communicate(timeout=120)[1]
    finally:
        if foreground.poll() is None:
            foreground.kill()
            foreground.wait()
    assert foreground.returncode != 0 and "interrupted: stopping every task" in output, output[-3000:]
    assert "restarting" not in output, output[-3000:]
    assert processes_mentioning(str(path)) == []


def test_a_rerun_resumes_only_the_same_run_and_fresh_starts_over(tmp_path):
    output = tmp_path / "output"
    training = {"epochs": 1, "lr_decay_epochs": [], "output_dir": str(output)}
    document = cluster_document(evaluator=False, logs_dir=str(tmp_path / "logs"), training=training)
    first = sh("run.sh", str(write_cluster(tmp_path, document)))
    assert first.returncode == 0, first.stderr[-3000:]
    assert all(line.startswith("[") for line in first.stderr.splitlines()), first.stderr  # no C++ noise

    document["training"]["model"] = "mlp"
    other = sh("run.sh", str(write_cluster(tmp_path, document)))
    assert other.returncode == 2 and "Traceback" not in other.stderr
    assert other.stderr.strip().splitlines() == [
        f"[launcher] error: cluster.json: training.output_dir = {str(output)!r}: holds a different run (model: "
        f"'cnn' → 'mlp'); use a new output_dir, or `sh run.sh --fresh` to move the old run aside (to "
        "output.replaced-<time>) and start over"]

    fresh = sh("run.sh", "--fresh", str(tmp_path / "cluster.json"))
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert "moved the previous run in" in fresh.stderr
    assert json.loads((output / "summary.json").read_text())["options"]["model"] == "mlp"
    [aside] = tmp_path.glob("output.replaced-*")
    assert json.loads((aside / "summary.json").read_text())["options"]["model"] == "cnn"

    document["training"]["epochs"] = 2  # more epochs change nothing about what is trained: it resumes,
    document["cluster"]["worker"] = document["cluster"]["worker"][:1]  # and so does a new shape (a worker less)
    more = sh("run.sh", str(write_cluster(tmp_path, document)))
    assert more.returncode == 0, more.stderr[-3000:]
    assert "resuming after epoch 1" in (tmp_path / "logs" / "chief-0.log").read_text()
    summary = json.loads((output / "summary.json").read_text())
    assert summary["epochs"] == 2 and summary["global_batch"] == 64  # the batch of the 2 workers it started with
    assert processes_mentioning(str(tmp_path)) == []

    (output / "checkpoints" / "ckpt-2.index").write_bytes(b"not a checkpoint")  # every start fails to restore it
    broken = sh("run.sh", str(tmp_path / "cluster.json"))
    assert broken.returncode == 1, broken.stderr[-3000:]
    assert re.search(r"run failed: chief:0 exited with code 1 again before training a step, with the same error as "
                     r"at its last start \(a restart cannot help\): \S+Error: .*sstable", broken.stderr), broken.stderr
    assert "restart 2 of" not in broken.stderr, broken.stderr[-3000:]  # stopped at the second failure
    assert re.search(r"training did not finish: chief:0 failed \(exit 1: \S+Error: .*sstable\); \S+ holds an "
                     r"earlier run's summary", broken.stderr), broken.stderr[-3000:]  # never "trained nothing"
    assert processes_mentioning(str(tmp_path)) == []


def test_the_worker_count_is_a_runs_shape_under_parameter_server_and_its_batch_when_synchronous(tmp_path):
    """The workers the global batch is counted for: a resized parameter_server run keeps its batch (the same run
    goes on); under multi_worker_mirrored every worker takes its share of each step, so a new count is another run."""
    from cluster.same_run import batch_workers, differences

    shrunk = cluster_config.parse(cluster_document(workers=1, evaluator=False), tmp_path / "cluster.json")
    assert batch_workers(shrunk, 2) == 2 and batch_workers(shrunk, None) == 1  # None: a new run, every worker
    assert differences({}, shrunk.training, previous_workers=2, current_workers=batch_workers(shrunk, 2)) == []
    document = cluster_document(workers=3, evaluator=False, training={"strategy": "multi_worker_mirrored"})
    grown = cluster_config.parse(document, tmp_path / "cluster.json")
    assert differences({}, grown.training, previous_workers=2, current_workers=batch_workers(grown, 2)) == [
        "workers (global batch): 2 → 3"]
