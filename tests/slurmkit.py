"""A real Slurm cluster for tests: a private munged, slurmctld on the bridge, a slurmd inside each namespace host."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import itertools
import os
import pwd
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator, Sequence

import netns
import slurmconf
import slurmdaemons
from clusterkit import free_ports, processes_mentioning
from slurmdaemons import SlurmSetupError

NEEDED_COMMANDS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "setpriv", "sbatch", "srun",
                   "salloc", "squeue", "scancel", "scontrol", "sinfo")
ETC_HOSTS = Path("/etc/hosts")
HOSTS_LOCK = Path("/run/lock/pscluster-etc-hosts.lock")  # parallel test runs edit /etc/hosts one at a time
NODE_NAMES_TIMEOUT_S = 300  # how long to wait for another run to free our node names in /etc/hosts
IDLE_TIMEOUT_S = 15
STEPS_END_TIMEOUT_S = 30  # for the job steps on the nodes to end after the jobs are cancelled
FINISHED_STATES = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                   "PREEMPTED", "TIMEOUT"}
_creations = itertools.count()


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlurmCluster:
    """A running cluster: node `node_names[i]` is slurmd inside `hosts` host i, at `node_addresses[i]`.

    Client commands (sbatch, srun, squeue, ...) need `env`, which points them at this cluster's slurm.conf.
    """

    layout: slurmconf.SlurmLayout
    hosts: netns.NamespaceHosts
    env: dict[str, str]
    hosts_block_marker: str  # its block in /etc/hosts begins "# BEGIN <marker>"

    @property
    def node_names(self) -> tuple[str, ...]:
        return self.layout.node_names

    @property
    def node_addresses(self) -> tuple[str, ...]:
        return self.layout.node_addresses

    @property
    def controller_address(self) -> str:
        """slurmctld's address: the launcher's, on the hosts' bridge."""
        return self.layout.controller_address

    @property
    def state_dir(self) -> Path:
        """slurm.conf, munge's files, the daemons' logs and spools, and jobs/ (scripts and their output)."""
        return self.layout.state_dir

    def run(self, argv: Sequence[str], *, timeout_s: float = 30, check: bool = True) -> subprocess.CompletedProcess:
        """Runs a client command against this cluster; output captured; raises on failure if `check`."""
        result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, env=self.env,
                                stdin=subprocess.DEVNULL, cwd=self.layout.jobs_dir)
        if check and result.returncode != 0:
            raise SlurmSetupError(f"`{shlex.join(argv)}` exited {result.returncode}: {result.stderr.strip()}")
        return result

    def submit(self, script: str, *sbatch_options: str) -> str:
        """Submits shell `script` with sbatch (output to jobs/slurm-JOBID.out); returns the job id."""
        path = self.layout.jobs_dir / f"job-{time.monotonic_ns()}.sh"
        path.write_text("#!/bin/sh\n" + script)
        output = self.run(["sbatch", "--parsable", f"--output={self.layout.jobs_dir}/slurm-%j.out",
                           *sbatch_options, str(path)]).stdout
        return output.strip().split(";")[0]

    def allocate(self, node_count: int, *, timeout_s: float = 20) -> str:
        """Allocates `node_count` nodes with no shell (steps join with `srun --jobid`); returns the job id."""
        result = self.run(["salloc", "--no-shell", f"--nodes={node_count}", f"--immediate={int(timeout_s)}"],
                          timeout_s=timeout_s + 5)
        return re.search(r"Granted job allocation (\d+)", result.stderr).group(1)

    def job_state(self, job_id: str) -> str:
        """The job's JobState as slurmctld reports it (PENDING, RUNNING, COMPLETED, CANCELLED, ...)."""
        output = self.run(["scontrol", "show", "job", "--oneliner", job_id]).stdout
        return re.search(r"\bJobState=(\S+)", output).group(1)

    def wait_for_job(self, job_id: str, *, timeout_s: float = 30) -> str:
        """Polls until the job has finished (`sbatch --wait` returns up to 10 s late); returns its final state."""
        return self._wait_for_state(job_id, FINISHED_STATES, timeout_s)

    def wait_until_running(self, job_id: str, *, timeout_s: float = 30) -> None:
        self._wait_for_state(job_id, {"RUNNING"}, timeout_s)

    def job_output(self, job_id: str) -> str:
        return (self.layout.jobs_dir / f"slurm-{job_id}.out").read_text()

    def node_states(self) -> dict[str, str]:
        """Each node's short state as sinfo shows it (idle, alloc, mix, down*, unk*, ...)."""
        return slurmdaemons.node_states(self.env)

    def _wait_for_state(self, job_id: str, wanted: set[str], timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while (state := self.job_state(job_id)) not in wanted:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is {state} after {timeout_s} s, not one of {sorted(wanted)}")
            time.sleep(0.1)
        return state


@contextlib.contextmanager
def create_slurm(hosts: netns.NamespaceHosts, *, first_node_number: int = 1,
                 node_name_digits: int = 2) -> Iterator[SlurmCluster]:
    """Runs Slurm on `hosts` (slurmd of node n01 in host 0, ...), yields it, then stops it and checks it is gone.

    Skips the test (fails it under CI=true) when this machine lacks Slurm; raises SlurmSetupError when a
    daemon does not start or teardown leaves anything behind. Enter it inside `netns.create_hosts`.
    """
    _skip_unless_installed()
    pid, creation = os.getpid(), next(_creations)
    names = slurmconf.node_names(len(hosts.addresses), first_number=first_node_number, digits=node_name_digits)
    controller_port, slurmd_port = free_ports(2)
    layout = slurmconf.SlurmLayout(
        state_dir=Path(tempfile.gettempdir()) / f"pscluster-slurm-{pid}-{creation}",
        controller_address=hosts.launcher_address, controller_port=controller_port, slurmd_port=slurmd_port,
        node_names=names, node_addresses=hosts.addresses)
    marker = f"{slurmconf.HOSTS_BLOCK_PREFIX}-{pid}-{creation}"
    try:
        with contextlib.ExitStack() as teardown:
            yield _start(layout, hosts, marker, teardown)
    finally:
        left = leftovers(layout, hosts, marker)
        if left:
            raise SlurmSetupError(f"Slurm teardown left {'; '.join(left)}: kill them by pid, delete the "
                                  f"block {marker} from {ETC_HOSTS}, rm -r the directory, and report the bug")


@contextlib.contextmanager
def create_hosts_with_slurm(count: int = 3, **naming) -> Iterator[SlurmCluster]:
    """`count` namespace hosts (see netns.create_hosts) with a Slurm node in each; `naming` as for create_slurm."""
    with netns.create_hosts(count) as hosts, create_slurm(hosts, **naming) as cluster:
        yield cluster


def leftovers(layout: slurmconf.SlurmLayout, hosts: netns.NamespaceHosts, marker: str) -> list[str]:
    """What this cluster left: daemons (they name its state dir), job steps, its /etc/hosts block, its files."""
    found = [f"process {line}" for line in processes_mentioning(str(layout.state_dir))]
    found += [f"slurmstepd pid {pid} in {namespace}" for namespace, pid in _job_steps(hosts)]
    found += [f"{ETC_HOSTS} block {marker}"] if marker in slurmconf.hosts_block_markers(ETC_HOSTS.read_text()) else []
    found += [f"directory {layout.state_dir}"] if layout.state_dir.exists() else []
    return found


def _skip_unless_installed() -> None:
    missing = [command for command in NEEDED_COMMANDS if shutil.which(command) is None]
    try:
        pwd.getpwnam("munge")
    except KeyError:
        missing.append("the munge user")
    if missing:
        netns.skip_or_fail(f"Slurm tests need {', '.join(missing)}: run `sh tests/system_packages.sh` as root")


def _start(layout: slurmconf.SlurmLayout, hosts: netns.NamespaceHosts, marker: str,
           teardown: contextlib.ExitStack) -> SlurmCluster:
    """Starts everything in order, registering each undo on `teardown` as it goes (they run in reverse)."""
    _make_state_dir(layout)
    teardown.callback(shutil.rmtree, layout.state_dir)
    env = client_env(layout)
    slurmdaemons.start_munged(layout, teardown)
    _add_hosts_block(marker, dict(zip(layout.node_names, layout.node_addresses, strict=True)))
    teardown.callback(_remove_hosts_block, marker)
    slurmdaemons.start_slurmctld(layout, teardown)
    slurmdaemons.start_slurmds(layout, hosts.sshd_pids, teardown)
    teardown.callback(_wait_for_steps_to_end, hosts)  # after the jobs' cancel, before slurmd is stopped
    teardown.callback(slurmdaemons.cancel_every_job, env)  # registered last, so it runs first
    slurmdaemons.wait_until_idle(layout, env, timeout_s=IDLE_TIMEOUT_S)
    return SlurmCluster(layout=layout, hosts=hosts, env=env, hosts_block_marker=marker)


def _wait_for_steps_to_end(hosts: netns.NamespaceHosts) -> None:
    """Waits (STEPS_END_TIMEOUT_S at most) until no slurmstepd runs in the hosts: squeue is empty once the controller
    has the cancel, but a node's step may still be ending, and a slurmd stopped then waited for it past its
    SIGTERM deadline (CI, 2026-12-02). One left after the wait is reported by `leftovers`."""
    deadline = time.monotonic() + STEPS_END_TIMEOUT_S
    while time.monotonic() < deadline and _job_steps(hosts):
        time.sleep(0.2)


def _job_steps(hosts: netns.NamespaceHosts) -> list[tuple[str, int]]:
    """(namespace, pid) of every slurmstepd running in the hosts."""
    return [(namespace, pid) for namespace in hosts.namespaces for pid in _pids_in_namespace(namespace)
            if _command_name(pid) == "slurmstepd"]


def client_env(layout: slurmconf.SlurmLayout) -> dict[str, str]:
    """This process's environment without inherited SLURM_* variables, with SLURM_CONF naming our slurm.conf."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    return {**env, "SLURM_CONF": str(layout.conf_file)}


def _make_state_dir(layout: slurmconf.SlurmLayout) -> None:
    layout.state_dir.mkdir(mode=0o755)  # munged, running as munge, must reach its socket inside
    for directory in (layout.controller_dir, layout.jobs_dir, *map(layout.node_dir, layout.node_names)):
        directory.mkdir(parents=True)
    layout.conf_file.write_text(slurmconf.slurm_conf(layout))


def _add_hosts_block(marker: str, entries: dict[str, str]) -> None:
    """Appends the block once no other live run's block names the same nodes; drops blocks of runs that died.

    Node names are global in /etc/hosts, so parallel runs with the same names take turns (bounded wait).
    """
    deadline = time.monotonic() + NODE_NAMES_TIMEOUT_S
    while True:
        with _locked(HOSTS_LOCK, timeout_s=30):
            text = slurmconf.without_stale_hosts_blocks(ETC_HOSTS.read_text())
            holders = slurmconf.blocks_naming(text, entries)
            if not holders:
                _rewrite_in_place(ETC_HOSTS, slurmconf.with_hosts_block(text, marker, entries))
                return
        if any(slurmconf.marker_pid(holder) == os.getpid() for holder in holders):
            raise SlurmSetupError(f"this test process already runs a Slurm cluster naming some of {list(entries)} "
                                  f"({holders}): give the second one other names with `first_node_number`")
        if time.monotonic() > deadline:
            raise SlurmSetupError(f"node names {list(entries)} stayed taken in {ETC_HOSTS} by {holders} for "
                                  f"{NODE_NAMES_TIMEOUT_S} s: is that test run hanging?")
        time.sleep(0.5)


def _remove_hosts_block(marker: str) -> None:
    with _locked(HOSTS_LOCK, timeout_s=30):
        _rewrite_in_place(ETC_HOSTS, slurmconf.without_hosts_block(ETC_HOSTS.read_text(), marker))


def _rewrite_in_place(path: Path, text: str) -> None:
    with open(path, "r+") as file:
        file.write(text)
        file.truncate()


@contextlib.contextmanager
def _locked(path: Path, *, timeout_s: float) -> Iterator[None]:
    """Holds an exclusive lock on `path` (released when this process dies, so never stale)."""
    with open(path, "a") as lock:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SlurmSetupError(f"another test run held {path} for {timeout_s} s; find it with "
                                          f"`fuser {path}`") from None
                time.sleep(0.2)
        yield


def _pids_in_namespace(namespace: str) -> list[int]:
    result = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=30)
    return [int(pid) for pid in result.stdout.split()]


def _command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
