"""A real Slurm cluster on namespace hosts: idle nodes, steps inside their node, batch jobs, step kill, teardown."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
from pathlib import Path

import pytest

import slurmkit
from clusterkit import ROOT, processes_mentioning, wait_until
from launcher.process import has_live_thread

pytestmark = pytest.mark.multihost

REMOTE_PYTHON = str((ROOT / ".venv").resolve() / "bin" / "python")  # hosts see it: only the workdir is private
PORT = 2222
LISTENER = ("import socket, sys, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);"
            " s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(); time.sleep(300)")  # SO_REUSEADDR as gRPC sets it


@pytest.fixture(scope="module")
def slurm():
    with slurmkit.create_hosts_with_slurm(3) as cluster:
        yield cluster


@pytest.fixture
def allocation(slurm):
    """A job holding every node with no shell; steps join it with `srun --jobid`. Cancelled afterwards."""
    job_id = slurm.allocate(len(slurm.node_names))
    yield job_id
    slurm.run(["scancel", job_id])
    assert slurm.wait_for_job(job_id) == "CANCELLED"


def step_argv(job_id: str, node: str, *argv: str) -> list[str]:
    """srun's argv for one task on `node` inside allocation `job_id`, sharing CPUs with other steps."""
    return ["srun", f"--jobid={job_id}", "--nodes=1", "--ntasks=1", f"--nodelist={node}", "--overlap", *argv]


def answers(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


def test_sinfo_shows_every_node_idle(slurm):
    assert slurm.node_states() == {name: "idle" for name in slurm.node_names}


def test_scontrol_expands_ranges_numerically_and_keeps_the_order_of_a_list(slurm):
    # Slurm 22.05.8, checked 2026-11-23: `scontrol show hostnames` never sorts as text. A range expands in
    # numeric order (n[9-10] -> n9 n10) and a comma list keeps its own order (n10,n9 -> n10 n9).
    def hostnames(expression: str) -> list[str]:
        return slurm.run(["scontrol", "show", "hostnames", expression]).stdout.split()

    assert hostnames("n[01-03]") == ["n01", "n02", "n03"]
    assert hostnames("n[9-10]") == ["n9", "n10"]
    assert hostnames("n10,n9") == ["n10", "n9"]


def test_a_step_runs_in_its_nodes_namespaces_and_sees_that_hosts_workdir(slurm, allocation):
    marker = slurm.hosts.workdir / "written-on-host-1"
    assert slurm.hosts.exec_in(1, ["sh", "-c", f"echo host1 > {marker}"]).returncode == 0
    try:
        for index, (name, address) in enumerate(zip(slurm.node_names, slurm.node_addresses)):
            report = f"hostname; hostname -I; getent hosts {name}; cat {marker} 2>/dev/null || echo absent"
            lines = slurm.run(step_argv(allocation, name, "sh", "-c", report)).stdout.splitlines()
            assert lines[0] == name
            assert lines[1].split() == [address]
            assert lines[2].split() == [address, name]  # node names resolve inside steps too
            assert lines[3] == ("host1" if index == 1 else "absent")
    finally:
        slurm.hosts.exec_in(1, ["rm", "-f", str(marker)])


def test_a_batch_job_with_a_step_on_every_node_completes(slurm):
    steps = "".join(f"srun --nodes=1 --ntasks=1 --nodelist={name} --overlap sh -c 'echo $(hostname) $(hostname -I)' &\n"
                    for name in slurm.node_names)
    job_id = slurm.submit(steps + "wait\n", f"--nodes={len(slurm.node_names)}")
    assert slurm.wait_for_job(job_id) == "COMPLETED"
    assert slurm.job_state(job_id) == "COMPLETED"
    reported = {tuple(line.split()) for line in slurm.job_output(job_id).splitlines()}
    assert reported == set(zip(slurm.node_names, slurm.node_addresses))


def test_scancel_of_a_step_ends_it_and_a_new_step_on_its_node_and_port_starts_at_once(slurm, allocation):
    node, address = slurm.node_names[1], slurm.node_addresses[1]
    listener = step_argv(allocation, node, REMOTE_PYTHON, "-c", LISTENER, str(PORT))
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(started(listener, slurm.env))
        assert wait_until(lambda: answers(address, PORT), timeout_s=20)
        assert step_ids(slurm, allocation) == [f"{allocation}.0"]
        slurm.run(["scancel", f"{allocation}.0"])
        first.wait(timeout=10)  # srun returns once the step is gone
        assert not answers(address, PORT)
        stack.enter_context(started(listener, slurm.env))
        assert wait_until(lambda: answers(address, PORT), timeout_s=10)
        assert step_ids(slurm, allocation) == [f"{allocation}.1"]


@contextlib.contextmanager
def started(argv: list[str], env: dict[str, str]):
    """A background srun, terminated (which cancels its step) and reaped on the way out."""
    process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        yield process
    finally:
        process.terminate()
        process.wait(timeout=40)  # srun waits up to 32 s for its step to end


def step_ids(slurm, job_id: str) -> list[str]:
    return slurm.run(["squeue", "--steps", "--noheader", f"--jobs={job_id}", "--format=%i"]).stdout.split()


def test_teardown_cancels_jobs_stops_every_daemon_and_removes_the_hosts_block():
    with slurmkit.create_hosts_with_slurm(2, first_node_number=9, node_name_digits=1) as cluster:
        assert cluster.node_names == ("n9", "n10")  # text order differs from numeric order
        job_id = cluster.submit("srun sleep 300\n", "--nodes=2")
        cluster.wait_until_running(job_id)
        node_list = re.search(r"\bNodeList=(\S+)", cluster.run(["scontrol", "show", "job", job_id]).stdout).group(1)
        assert node_list == "n[9-10]"
        assert cluster.run(["scontrol", "show", "hostnames", node_list]).stdout.split() == ["n9", "n10"]
        assert list(cluster.node_states()) == ["n9", "n10"]  # sinfo lists nodes in numeric order too
        assert socket.gethostbyname("n10") == cluster.node_addresses[1]
        daemons = [int(line.split(":")[0]) for line in processes_mentioning(str(cluster.state_dir))]
        assert len(daemons) >= 4  # munged, slurmctld, two slurmd
    assert slurmkit.leftovers(cluster.layout, cluster.hosts, cluster.hosts_block_marker) == []
    assert [pid for pid in daemons if has_live_thread(pid)] == []
    assert cluster.hosts_block_marker not in Path("/etc/hosts").read_text()
    assert not cluster.state_dir.exists()
