"""The daemons of a test Slurm cluster: start munged, slurmctld and slurmds, wait for them, stop them in order."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import time
from pathlib import Path
from typing import Sequence

import netns
import slurmconf
from clusterkit import wait_for_line

MUNGED = "/usr/sbin/munged"
SLURMCTLD = "/usr/sbin/slurmctld"
SLURMD = "/usr/sbin/slurmd"
START_TIMEOUT_S = 10
STOP_TIMEOUT_S = 10  # slurmctld takes over 1.5 s to stop
QUEUE_DRAIN_TIMEOUT_S = 60  # Slurm's KillWait (30 s by default) bounds a cancelled step's end; 15 s ran out under load
POLL_S = 0.1
# A namespace host's /sys is the sysfs `ip netns exec` mounted, with no cgroup under it, and slurmd refuses to
# start without one ("Unable to initialize cgroup plugin") even with proctrack/linuxproc and task/none. In a
# mount namespace of its own (a child of the host's, so it sees the host's private workdir), slurmd gets what
# its cgroup/v1 detection checks: a tmpfs on /sys/fs/cgroup holding a named "systemd" cgroup hierarchy.
CGROUP_FOR_SLURMD = ("mount -t tmpfs -o size=1m,mode=755 pscluster-cgroup /sys/fs/cgroup && "
                     "mkdir /sys/fs/cgroup/systemd && "
                     "mount -t cgroup -o none,name=systemd pscluster-cgroup /sys/fs/cgroup/systemd")


class SlurmSetupError(netns.HostSetupError):
    """Slurm could not be started or stopped although this machine has it: a bug, or state left behind."""


def start_munged(layout: slurmconf.SlurmLayout, teardown: contextlib.ExitStack) -> None:
    """Starts a munged of our own (own key, socket, pid, log and seed files) as the munge user."""
    munge = pwd.getpwnam("munge")
    layout.munge_dir.mkdir(mode=0o755)  # munged refuses a socket directory others cannot search
    os.chown(layout.munge_dir, munge.pw_uid, munge.pw_gid)
    key = layout.munge_dir / "munge.key"
    with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400), "wb") as file:
        file.write(os.urandom(1024))
    os.chown(key, munge.pw_uid, munge.pw_gid)
    files = {"key-file": key, "socket": layout.munge_socket, "pid-file": layout.munge_dir / "munged.pid",
             "log-file": layout.munge_dir / "munged.log", "seed-file": layout.munge_dir / "munged.seed"}
    argv = ["setpriv", "--reuid=munge", "--regid=munge", "--init-groups", MUNGED, "--foreground",
            *(f"--{option}={path}" for option, path in files.items())]
    log = layout.state_dir / "munged.out"
    process = _start(argv, log)
    teardown.callback(signal_and_wait, process, process.pid, "munged")
    if not _wait_for(lambda: layout.munge_socket.exists(), START_TIMEOUT_S, process):
        raise SlurmSetupError(f"munged did not create {layout.munge_socket}: {_tail(log)}")


def start_slurmctld(layout: slurmconf.SlurmLayout, teardown: contextlib.ExitStack) -> None:
    """Starts slurmctld on the bridge, with hostname `ctl` (else: "not a valid controller") in a UTS namespace."""
    script = f"hostname {slurmconf.CONTROLLER_NAME} && exec {SLURMCTLD} -D -f {layout.conf_file}"
    log = layout.controller_dir / "slurmctld.out"
    process = _start(["unshare", "--uts", "sh", "-c", script], log)  # unshare and sh exec: the pid is slurmctld's
    teardown.callback(signal_and_wait, process, process.pid, "slurmctld")
    if not wait_for_line(log, "Running as primary controller", timeout_s=START_TIMEOUT_S, process=process):
        raise SlurmSetupError(f"slurmctld did not start: {_tail(log)}")


def start_slurmds(layout: slurmconf.SlurmLayout, sshd_pids: Sequence[int], teardown: contextlib.ExitStack) -> None:
    """Starts node i's slurmd in host i's network, mount and pid namespaces (entered through its sshd)."""
    daemons: list[tuple[subprocess.Popen, int, str]] = []
    teardown.callback(_stop_all, daemons)
    for name, sshd_pid in zip(layout.node_names, sshd_pids, strict=True):
        script = f"{CGROUP_FOR_SLURMD} && hostname {name} && exec {SLURMD} -D -N {name} -f {layout.conf_file}"
        enter = ["nsenter", f"--target={sshd_pid}", "--net", "--mount", "--pid", "--"]  # not `ip netns exec`
        unshare = ["unshare", "--uts", "--mount", "--propagation=private"]
        process = _start([*enter, *unshare, "sh", "-c", script], layout.node_dir(name) / "slurmd.out")
        daemons.append((process, _child_pid(process), f"slurmd of {name}"))


def wait_until_idle(layout: slurmconf.SlurmLayout, env: dict[str, str], *, timeout_s: float) -> None:
    """Waits until sinfo shows every node idle; raises with each node's state and log otherwise."""
    states: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = node_states(env)
        if all(states.get(name) == "idle" for name in layout.node_names):
            return
        time.sleep(POLL_S)
    logs = "; ".join(f"{name}: {_tail(layout.node_dir(name) / 'slurmd.out')}" for name in layout.node_names)
    raise SlurmSetupError(f"nodes not idle after {timeout_s} s: {states or 'sinfo failed'}; slurmd output: {logs}")


def node_states(env: dict[str, str]) -> dict[str, str]:
    """Each node's short state as sinfo shows it (idle, alloc, mix, down*, unk*, ...); {} while sinfo fails."""
    result = _client(["sinfo", "--noheader", "--Node", "--format=%N %t"], env)
    return dict(line.split() for line in result.stdout.splitlines()) if result.returncode == 0 else {}


def cancel_every_job(env: dict[str, str]) -> None:
    """Cancels every job and waits until squeue is empty: slurmstepd outlives slurmd, so this comes first."""
    job_ids = _client(["squeue", "--noheader", "--format=%i"], env).stdout.split()
    if job_ids:
        _client(["scancel", *job_ids], env)
    if not _wait_for(lambda: _client(["squeue", "--noheader"], env).stdout.strip() == "", QUEUE_DRAIN_TIMEOUT_S):
        queue = _client(["squeue"], env).stdout
        raise SlurmSetupError(f"jobs still queued {QUEUE_DRAIN_TIMEOUT_S} s after scancel:\n{queue}")


def signal_and_wait(process: subprocess.Popen, pid: int, what: str) -> None:
    """SIGTERMs `pid` (the daemon in `process` or its only child); waits for `process`; SIGKILLs and raises if slow."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    _wait_or_kill(process, pid, what)


def _stop_all(daemons: list[tuple[subprocess.Popen, int, str]]) -> None:
    """SIGTERMs every daemon at once, then waits for each."""
    for _, pid, _ in daemons:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    for process, pid, what in daemons:
        _wait_or_kill(process, pid, what)


def _wait_or_kill(process: subprocess.Popen, pid: int, what: str) -> None:
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        process.wait(timeout=STOP_TIMEOUT_S)
        raise SlurmSetupError(f"{what} (pid {pid}) ignored SIGTERM for {STOP_TIMEOUT_S} s; it was killed") from None


def _start(argv: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as output:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _child_pid(process: subprocess.Popen) -> int:
    """The pid of the one child that `process` (nsenter, which forks to enter a pid namespace) starts."""
    children_file = Path(f"/proc/{process.pid}/task/{process.pid}/children")
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        children = children_file.read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.01)
    process.kill()
    process.wait(timeout=STOP_TIMEOUT_S)
    raise SlurmSetupError(f"`{' '.join(process.args[:3])} ...` (pid {process.pid}) started no child")


def _wait_for(condition, timeout_s: float, process: subprocess.Popen | None = None) -> bool:
    """Polls `condition` until true (True) or `timeout_s` passes or `process` exits (False)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline or (process is not None and process.poll() is not None):
            return False
        time.sleep(POLL_S)
    return True


def _client(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env, stdin=subprocess.DEVNULL)


def _tail(path: Path, lines: int = 5) -> str:
    text = path.read_text(errors="replace") if path.exists() else "(no log)"
    return " | ".join(text.strip().splitlines()[-lines:])
