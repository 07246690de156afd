"""Slurm's refusals and endings read without Slurm: partitions parsed from scontrol/sinfo output as Slurm 22.05
prints them, requests they can never run, sbatch's errors and pending reasons translated, endings named."""

from __future__ import annotations

import pytest

from cluster.settings import slurm_minutes
from launcher.backends.slurm import endings, limits, refusals
from clusterkit import run_module
from test_slurm_placement import SIZES, load, problems

# `scontrol show partition --oneliner` and `sinfo --Node --format='%N %c %G'` as Slurm 22.05 prints them
PARTITIONS = (
    "PartitionName=test AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES QoS=N/A "
    "DefaultTime=NONE MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 Nodes=n[01-03] State=UP TotalCPUs=12 "
    "TotalNodes=3\n"
    "PartitionName=short AllowGroups=ALL Default=NO MaxNodes=2 MaxTime=01:00:00 Nodes=n[01-03] State=UP "
    "TotalNodes=3\n")
NODES = "n01 4 (null)\nn02 4 (null)\nn03 4 (null)\n"


def partition(name="test", nodes=NODES):
    return limits.partition(limits.parse_partitions(PARTITIONS)[name], nodes)


def lines(found) -> list[str]:
    return [problem.text() for problem in found]


def test_partitions_are_read_with_their_limits():
    parsed = limits.parse_partitions(PARTITIONS)
    assert limits.default_partition(parsed) == "test"
    assert partition() == limits.Partition(name="test", total_nodes=3, max_nodes=None, max_time_min=None,
                                           state="UP", node_cpus=(4, 4, 4), gpu_nodes=0)
    short = partition("short", "n01 8 gpu:2\nn02 8+ (null)\n")
    assert (short.usable_nodes, short.max_time_min, short.node_cpus, short.gpu_nodes) == (2, 60, (8, 8), 1)


@pytest.mark.parametrize("text,minutes", [("30", 30), ("30:30", 30.5), ("2:00:00", 120), ("1-0", 1440),
                                          ("1-2:30", 1590), ("1-0:0:30", 1440.5), ("UNLIMITED", None)])
def test_slurm_times_in_minutes(text, minutes):
    assert slurm_minutes(text) == minutes


def test_more_nodes_than_the_partition_has_names_the_nodes_and_the_fix(tmp_path):
    config = load(tmp_path, SIZES)  # the default asks for 5 nodes: one per ps and worker, plus one
    found = lines(limits.request_problems(config, partition(), 5, 1))
    assert found == ["slurm.nodes = '5 (the default: one per ps and worker, plus one)': asks for 5 node(s); "
                     "partition test has 3 node(s) (Slurm would leave "
                     "it pending: PartitionNodeLimit); set slurm.nodes to 3 or fewer (tasks then share nodes), or "
                     "pick another slurm.partition"]
    config = load(tmp_path, SIZES, slurm={"nodes": 3, "partition": "short"})
    assert lines(limits.request_problems(config, partition("short"), 3, 2))[0].startswith(
        "slurm.nodes = 3: asks for 3 node(s); partition short allows 2 node(s) per job (MaxNodes)")


def test_cpus_over_a_nodes_name_the_cpus(tmp_path):
    config = load(tmp_path, SIZES, slurm={"nodes": 3, "cpus_per_task": 8})
    assert lines(limits.request_problems(config, partition(), 3, 1)) == [
        "slurm.cpus_per_task = 8: needs 8 CPUs on one node; the nodes of partition test have at most 4 CPUs; set "
        "slurm.cpus_per_task to 4 or fewer"]
    config = load(tmp_path, SIZES, slurm={"nodes": 3, "cpus_per_task": 3})
    assert "needs 6 CPUs on one node (2 tasks per node × 3)" in lines(
        limits.request_problems(config, partition(), 3, 2))[0]


def test_time_limit_over_maxtime_and_gpus_on_cpu_nodes(tmp_path):
    config = load(tmp_path, SIZES, slurm={"nodes": 2, "partition": "short", "time_limit": "2:00:00",
                                          "gpus_per_worker": 1})
    found = lines(limits.request_problems(config, partition("short"), 2, 3))
    assert found[0] == ("slurm.time_limit = '2:00:00': is over the MaxTime of partition short (01:00:00); use at "
                        "most 01:00:00, or pick another slurm.partition")
    assert found[1].startswith("slurm.gpus_per_worker = 1: asks for GPUs; no node of partition short has a gpu")


def test_a_request_that_fits_gets_no_problem(tmp_path):
    config = load(tmp_path, SIZES, slurm={"nodes": 3, "cpus_per_task": 2, "time_limit": "30"})
    assert limits.request_problems(config, partition(), 3, 2) == []


SBATCH_ERRORS = [
    ("sbatch: error: invalid partition specified: nope\nsbatch: error: Batch job submission failed: Invalid "
     "partition name specified", "slurm.partition"),
    ("sbatch: error: Invalid generic resource (gres) specification", "slurm.gpus_per_worker = 1"),
    ("sbatch: error: CPU count per node can not be satisfied\nsbatch: error: Batch job submission failed: "
     "Requested node configuration is not available", "slurm.cpus_per_task = 1"),
    ("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
     "slurm.account"),
    ("sbatch: error: Batch job submission failed: Invalid qos specification", "slurm.sbatch_options"),
    ("sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)",
     "slurm.time_limit"),
    ("sbatch: error: Batch job submission failed: Node count specification invalid", "slurm.nodes = '5 (the "
     "default"),
    ("sbatch: error: Batch job submission failed: Invalid node name specified", "cluster = {'chief': 1, "),
]


@pytest.mark.parametrize("stderr,starts", SBATCH_ERRORS)
def test_sbatch_errors_become_one_line_naming_the_field(tmp_path, stderr, starts):
    config = load(tmp_path, SIZES, slurm={"gpus_per_worker": 1})
    problem = refusals.sbatch_problem(config, stderr, 5)
    text = problem.text()
    assert text.startswith(starts) and "refused by sbatch (" in text and "\n" not in text, text
    assert "sbatch: error:" not in text


def test_unknown_sbatch_errors_are_left_as_they_are(tmp_path):
    assert refusals.sbatch_problem(load(tmp_path, SIZES), "sbatch: error: something new", 5) is None


def test_pending_reasons_that_never_clear_name_the_field_and_the_cancel(tmp_path):
    config = load(tmp_path, SIZES)
    problem = refusals.pending_problem(config, "12", "PartitionNodeLimit", 5)
    assert problem.text().startswith("slurm.nodes = '5 (the default: one per ps and worker, plus one)': job 12 can "
                                     "never start (Slurm's reason: PartitionNodeLimit); it was cancelled; ")
    assert refusals.pending_problem(config, "12", "QOSMaxWallDurationPerJobLimit", 5).field == "slurm.time_limit"
    for waits in ("Resources", "Priority", "ReqNodeNotAvail,_UnavailableNodes:n03", "None"):
        assert refusals.pending_problem(config, "12", waits, 5) is None
    assert refusals.pending_line("12", "Resources", 3.2, 300) == (
        "job 12 pending (Resources: waiting for nodes to become free); waiting up to 300 s "
        "(slurm.start_timeout_s), 3 s so far")


def test_endings_are_named_by_their_cause():
    timeout = {"JobState": "TIMEOUT", "TimeLimit": "00:01:00", "EndTime": "2026-11-24T05:16:08"}
    assert endings.cause("5", timeout, "") == (
        "job 5 ended at 2026-11-24T05:16:08: TIMEOUT (it reached its time limit (00:01:00; slurm.time_limit)); "
        "raise slurm.time_limit; `sh run.sh` again (without --fresh) resumes from the last checkpoint")
    completing = {"JobState": "COMPLETING", "Reason": "TimeLimit", "TimeLimit": "00:01:00"}
    assert endings.state_of(completing, "") == "TIMEOUT"
    banner = "slurmstepd-n01: error: *** JOB 6 ON n01 CANCELLED AT 2026-11-24T05:14:45 ***\n"
    assert endings.cause("6", {"JobState": "COMPLETING"}, banner).startswith(
        "job 6 ended at 2026-11-24T05:14:45: CANCELLED (it was cancelled with scancel by a user or an administrator")
    preempted = "*** JOB 7 ON n02 CANCELLED AT 2026-11-24T05:14:45 DUE TO PREEMPTION ***"
    assert endings.state_of({}, preempted) == "PREEMPTED"
    assert "Slurm no longer lists it" in endings.cause("8", {}, "")


def test_a_completing_job_is_asked_again_until_it_shows_why_it_ended():
    answers = iter([{"JobState": "COMPLETING"}, {"JobState": "CANCELLED", "EndTime": "2026-11-26T08:18:06"}])
    named = endings.settled_cause("4", {"JobState": "COMPLETING"}, lambda: next(answers), lambda: "", pause_s=0)
    assert named.startswith("job 4 ended at 2026-11-26T08:18:06: CANCELLED (it was cancelled with scancel"), named
    outputs = iter(["", "*** JOB 4 ON n01 CANCELLED AT 2026-11-26T08:18:05 ***"])
    named = endings.settled_cause("4", {"JobState": "COMPLETING"}, dict, lambda: next(outputs), pause_s=0)
    assert named.startswith("job 4 ended at 2026-11-26T08:18:05: CANCELLED"), named
    stuck = endings.settled_cause("4", {"JobState": "COMPLETING"}, dict, str, timeout_s=0.05, pause_s=0.01)
    assert stuck == "job 4 ended: COMPLETING; see `scontrol show job 4`", stuck


def test_a_job_signalling_a_step_still_runs_and_one_that_timed_out_has_ended(tmp_path):
    import threading
    import time

    from launcher.backends.base import AgentFailed
    from launcher.backends.slurm.node import SlurmView

    view = SlurmView.__new__(SlurmView)  # its answers set here instead of asked of slurmctld
    view.job_id, view.max_age_s, view.lock, view.asked_at = "4", 60.0, threading.Lock(), time.monotonic()
    view.nodes, view.job_nodes, view.output = {"n01": "alloc"}, {"n01"}, tmp_path / "slurm-4.out"
    for state in ("RUNNING", "SIGNALING"):  # SIGNALING: while our own warning reaches the chief's step
        view.job = {"JobState": state}
        view.check("n01")
    view.job = {"JobState": "TIMEOUT", "TimeLimit": "00:02:00"}
    with pytest.raises(AgentFailed, match=r"job 4 ended: TIMEOUT \(it reached its time limit"):
        view.check("n01")


def test_the_time_left_is_read_from_endtime():
    import time
    end = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(1_800_000_000))
    assert endings.seconds_left({"EndTime": end}, 1_800_000_000 - 90) == 90
    assert endings.seconds_left({"EndTime": "Unknown"}, 0) is None and endings.seconds_left({}, 0) is None


def test_the_warning_must_come_inside_the_time_limit(tmp_path):
    found = problems(tmp_path, SIZES, slurm={"time_limit": "2", "signal_before_end_s": 120})
    assert found == [f"error: {tmp_path / 'cluster.json'}: slurm.signal_before_end_s = 120: is not shorter than "
                     "slurm.time_limit (2); use less than 120 s, e.g. a tenth of the time limit"]
    assert problems(tmp_path, SIZES, slurm={"signal_before_end_s": -1})[0].endswith(
        "(Slurm's --signal limit); use e.g. 120: time for the chief to write a checkpoint before the time limit "
        "(0: no warning)")
    assert load(tmp_path, SIZES, slurm={"time_limit": "5", "signal_before_end_s": 60}).slurm.signal_before_end_s == 60


def test_print_config_shows_the_cluster_file_slurm_steps_read(tmp_path):
    config = load(tmp_path, SIZES, slurm={"nodes": 3})
    shown = run_module("roles.launch", "print_config", str(config.source))
    assert shown.returncode == 0, shown.stderr
    commands = [line for line in shown.stdout.splitlines() if " -m " in line]
    assert commands and all(line.endswith(f"--cluster {tmp_path / 'logs' / 'slurm-cluster.json'}")
                            for line in commands), commands
    assert ".pscluster" not in shown.stdout
