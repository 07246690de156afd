"""Slurm as users meet it, against a real Slurm (3 nodes of 4 CPUs, one partition): impossible requests refused at
once in one line, a node taken out of the job mid-run counted as lost (never relaunched), and a time limit
reached after Slurm's warning reached the chief's step, the ending named TIMEOUT and every task shown stopped."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

import slurmkit
from clusterkit import ROOT, wait_for_line
from modelaxis import each_model, training as model_training
from test_long_runs import wait_for_count
from test_slurm import assert_nothing_left, cluster_file, count_lines, queue, sh, wait_until
from throttling import Throttle, server_pid

pytestmark = [pytest.mark.multihost, pytest.mark.cluster]
REFUSED_WITHIN_S = 60  # far below slurm.start_timeout_s (300): the answer comes from Slurm at once


@pytest.fixture(scope="module")
def slurm():
    with slurmkit.create_hosts_with_slurm(3) as cluster:
        yield cluster
        assert queue(cluster) == "", "a test left a job in the queue"


def refused(slurm, path: str) -> str:
    """Runs `sh run.sh` on a request Slurm can never run; returns its error line, checking it came at once."""
    started = time.monotonic()
    result = sh(slurm, str(ROOT / "run.sh"), path, timeout_s=REFUSED_WITHIN_S)
    errors = [line for line in result.stderr.splitlines() if "error: " in line]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert time.monotonic() - started < REFUSED_WITHIN_S
    assert queue(slurm) == ""
    return errors[0]


def test_requests_the_partition_can_never_run_are_refused_at_once_in_one_line(slurm, tmp_path):
    sizes = {"chief": 1, "worker": 2, "ps": 2}  # the default asks for 5 nodes; the partition has 3
    line = refused(slurm, cluster_file(tmp_path, sizes, {}))
    assert line.endswith("slurm.nodes = '5 (the default: one per ps and worker, plus one)': asks for 5 node(s); "
                         "partition test has 3 node(s) (Slurm would leave it pending: PartitionNodeLimit); set "
                         "slurm.nodes to 3 or fewer (tasks then share nodes), or pick another slurm.partition"), line
    line = refused(slurm, cluster_file(tmp_path, sizes, {}, slurm={"nodes": 3, "cpus_per_task": 8}))
    assert line.endswith("slurm.cpus_per_task = 8: needs 16 CPUs on one node (2 tasks per node × 8); the nodes of "
                         "partition test have at most 4 CPUs; set slurm.cpus_per_task to 2 or fewer"), line
    line = refused(slurm, cluster_file(tmp_path, sizes, {}, slurm={"nodes": 3, "gpus_per_worker": 1}))
    assert "slurm.gpus_per_worker = 1: asks for GPUs; no node of partition test has a gpu resource" in line
    line = refused(slurm, cluster_file(tmp_path, sizes, {}, slurm={"nodes": 3, "partition": "gpu"}))
    assert "slurm.partition = 'gpu': is not a partition of this cluster" in line and "use one of test" in line
    line = refused(slurm, cluster_file(tmp_path, sizes, {}, slurm={"nodes": 3, "sbatch_options": ["--constraint=big"]}))
    assert "slurm.sbatch_options = ['--constraint=big']: refused by sbatch (" in line, line  # sbatch's own words
    script = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "roles.launch", "sbatch",
                             cluster_file(tmp_path, sizes, {}), "--output", str(tmp_path / "job.sh")], cwd=ROOT,
                            env=slurm.env, capture_output=True, text=True, timeout=60)
    assert script.returncode == 2 and "partition test has 3 node(s)" in script.stderr, script.stderr
    assert not (tmp_path / "job.sh").exists()


def test_a_job_waiting_for_busy_nodes_says_why_and_gives_up_after_start_timeout_s(slurm, tmp_path):
    held = slurm.run(["salloc", "--no-shell", "--nodes=3", "--exclusive", "--immediate=20"], timeout_s=30)
    holder = re.search(r"Granted job allocation (\d+)", held.stderr)[1]
    try:
        path = cluster_file(tmp_path, {"chief": 1, "worker": 1, "ps": 1}, {}, slurm={"start_timeout_s": 4})
        result = sh(slurm, str(ROOT / "run.sh"), path, timeout_s=60)
    finally:
        slurm.run(["scancel", holder])
    assert result.returncode == 1, result.stderr
    assert re.search(r"job \d+ pending \((Resources: waiting for nodes to become free|Priority: other jobs come "
                     r"first)\); waiting up to 4 s \(slurm.start_timeout_s\)", result.stderr), result.stderr
    assert re.search(r"run failed: job \d+ still PENDING after 4 s \(Slurm's reason: (Resources|Priority)\)",
                     result.stderr), result.stderr
    assert wait_until(lambda: queue(slurm) == "", 30), queue(slurm)


def statuses(logs) -> dict[str, str]:
    return {row["task"]: row["state"] for row in json.loads((logs / "status.json").read_text())["tasks"]}


def test_a_node_set_down_is_lost_and_a_time_limit_warns_the_chief_then_ends_as_timeout(slurm, tmp_path):
    n = slurm.node_names
    cluster = {"chief": [f"{n[0]}:22420"], "worker": [f"{n[1]}:22421", f"{n[2]}:22422"], "ps": [f"{n[1]}:22423"]}
    path = cluster_file(tmp_path, cluster, {"epochs": 2000, "steps_per_epoch": 50},  # outlasts the time limit
                        slurm={"time_limit": "2", "signal_before_end_s": 10})
    logs = tmp_path / "logs"
    started = sh(slurm, str(ROOT / "run.sh"), "--detach", path)
    assert started.returncode == 0, started.stderr
    try:
        assert wait_for_line(logs / "chief-0.log", "train | epoch 1/", 100), (logs / "launcher.log").read_text()
        slurm.run(["scontrol", "update", f"nodename={n[2]}", "state=down", "reason=taken-away-by-the-test"])
        assert wait_for_line(logs / "launcher.log", f"{n[2]} lost", 30), (logs / "launcher.log").read_text()
        assert "worker:1" in statuses(logs) and wait_until(lambda: statuses(logs)["worker:1"] == "lost", 10)
        # the rest only waits for the time limit: the worker left runs a tenth of the time meanwhile, and the
        # cluster's CPU goes to the tests beside this one (tests/lanes.py)
        with Throttle(server_pid(str(tmp_path), "worker", 0), share=0.1):
            assert wait_for_line(logs / "launcher.log", "Slurm warns its time limit is 10 s away", 150), (
                logs / "launcher.log").read_text()
            assert wait_for_line(logs / "launcher.log", "run failed: job", 120), (logs / "launcher.log").read_text()
        assert wait_for_line(logs / "launcher.log", "nothing of it remains", 60), (logs / "launcher.log").read_text()
    finally:
        sh(slurm, str(ROOT / "kill.sh"), path)
        slurm.run(["scontrol", "update", f"nodename={n[2]}", "state=resume"], check=False)
    log = (logs / "launcher.log").read_text()
    assert count_lines(logs / "launcher.log", f"worker:1 started on {n[2]}") == 1, log  # never relaunched there
    assert "Slurm took it out of job" in log or "Slurm marks it down" in log, log
    warned = log.index("Slurm warns its time limit")
    assert "sent SIGTERM to chief:0 (step " in log[warned:].splitlines()[0], log[warned:]
    # (a stop that lands on an epoch's end writes the epoch's checkpoint, ckpt-<epoch>, not ckpt-<epoch>-<step>)
    assert re.search(r"checkpoint ckpt-\d+(?:-\d+)? written .* exiting \(code 4\)", log[warned:]), log[warned:]
    assert "chief:0 was stopped from outside the launcher (SIGTERM) and wrote a checkpoint" in log[warned:]
    assert "not started again in this job" in log[warned:] and "chief:0 started on" not in log[warned:], log[warned:]
    assert re.search(r"run failed: job \d+ ended at \S+: TIMEOUT \(it reached its time limit \(00:02:00; "
                     r"slurm.time_limit\)\); raise slurm.time_limit; `sh run.sh` again", log), log
    assert "running" not in statuses(logs).values() and statuses(logs)["worker:1"] == "lost", statuses(logs)
    assert re.search(r"tasks: chief:0 stopped, worker:0 stopped, worker:1 lost, ps:0 stopped", log), log
    assert "(time limit, scancel, preemption?)" not in log
    assert_nothing_left(slurm, tmp_path)


@each_model
def test_the_batch_scripts_warning_reaches_the_chiefs_step_alone_and_the_next_job_resumes(slurm, tmp_path, model):
    path = cluster_file(tmp_path, {"chief": 1, "worker": 1, "ps": 1},
                        model_training(model, epochs=2000, steps_per_epoch=50), slurm={"nodes": 2})
    logs, script = tmp_path / "logs", tmp_path / "job.sh"
    written = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "roles.launch", "sbatch", path,
                              "--output", str(script)], cwd=ROOT, capture_output=True, text=True, timeout=60,
                             env=slurm.env)
    assert written.returncode == 0 and "#SBATCH --signal=B:USR1@120" in script.read_text(), written.stderr
    job_id = slurm.run(["sbatch", "--parsable", str(script)]).stdout.strip()
    try:
        assert wait_for_line(logs / "chief-0.log", "train | epoch 1/", 180), (logs / f"slurm-{job_id}.out")
        slurm.run(["scancel", "--batch", "--signal=USR1", job_id])  # what Slurm sends 120 s before the limit
        state = slurm.wait_for_job(job_id, timeout_s=120)
    finally:
        slurm.run(["scancel", job_id], check=False)
    output = (logs / f"slurm-{job_id}.out").read_text()
    assert "the time limit is near: SIGTERM to the lead trainer" in output, output
    assert "lead trainer exited with code 4" in output and state == "FAILED", output  # checkpointed, resumable
    stopped = re.search(r"stopped as asked: checkpoint (ckpt-\d+(-\d+)?) written", (logs / "chief-0.log").read_text())
    assert stopped, (logs / "chief-0.log").read_text()[-3000:]
    assert "CANCELLED" in (logs / "ps-0.log").read_text() and "[batch] training did not finish" in output, output
    assert wait_until(lambda: queue(slurm) == "", 30)

    again = slurm.run(["sbatch", "--parsable", str(script)]).stdout.strip()  # the same script, submitted again
    try:
        assert wait_for_line(logs / "chief-0.log", f"from {stopped[1]} (optimizer step", 180), (
            logs / f"slurm-{again}.out").read_text()  # the new job's chief restored what the warning saved
        assert wait_for_count(logs / "chief-0.log", "train | epoch", 1, 120), (logs / "chief-0.log").read_text()
    finally:
        slurm.run(["scancel", again], check=False)
    assert wait_until(lambda: queue(slurm) == "", 60)
