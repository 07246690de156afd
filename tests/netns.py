"""Hosts for multi-host tests: network namespaces on a private bridge, each with its own sshd and workdir."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import itertools
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator, Sequence

import pytest

import sshkeys
from clusterkit import processes_mentioning, wait_for_line

SSHD = "/usr/sbin/sshd"
NEEDED_COMMANDS = ("ip", "ssh", "ssh-keygen", "unshare", "nsenter", "rsync", SSHD)
SUBNET_PREFIX = "10.213"  # hosts get 10.213.<k>.10, .11, ...; the launcher 10.213.<k>.1 on the bridge
FIRST_HOST_OCTET = 10
SUBNET_LOCK = Path("/run/lock/pscluster-netns.lock")
WORKDIR_PARENT = Path("/srv")
WORKDIR_SIZE = "1g"
SSH_CONNECT_TIMEOUT_S = 5
STEP_TIMEOUT_S = 30
_creations = itertools.count()


class HostSetupError(RuntimeError):
    """Hosts could not be built or torn down although this machine supports them: a bug, or state left behind."""


@dataclasses.dataclass(frozen=True)
class Claims:
    """Every name one set of hosts takes on this machine; pid and creation number keep parallel runs apart."""

    bridge: str
    links: tuple[str, ...]  # bridge side of each host's veth
    namespaces: tuple[str, ...]
    workdir: Path
    state_dir: Path  # keys, known_hosts, sshd logs

    @classmethod
    def new(cls, count: int) -> "Claims":
        pid, creation = os.getpid(), next(_creations)
        short = f"{pid:x}-{creation}"  # interface names hold at most 15 characters
        return cls(bridge=f"ps{short}br", links=tuple(f"ps{short}h{i}" for i in range(count)),
                   namespaces=tuple(f"pscluster-{pid}-{creation}-h{i}" for i in range(count)),
                   workdir=WORKDIR_PARENT / f"pscluster-{pid}-{creation}",
                   state_dir=Path(tempfile.gettempdir()) / f"pscluster-netns-{pid}-{creation}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class NamespaceHosts:
    """Hosts that the launcher reaches over ssh from `launcher_address` on a bridge of their own.

    Host i has `addresses[i]` on its eth0 and its own network, mount and pid namespaces. It sees `workdir`
    as an empty tmpfs of its own; the rest of the filesystem (/usr, the project's .venv) is the launcher's.
    """

    addresses: tuple[str, ...]
    launcher_address: str
    identity_file: Path
    known_hosts_file: Path
    ssh_user: str
    sshd_pids: tuple[int, ...]  # as seen from the launcher
    claims: Claims

    @property
    def workdir(self) -> Path:
        return self.claims.workdir

    @property
    def namespaces(self) -> tuple[str, ...]:
        return self.claims.namespaces

    @property
    def ssh_options(self) -> list[str]:
        """ssh's options for these hosts (e.g. for `rsync -e`): this key only, these host keys only, no prompt."""
        return ["-F", "/dev/null", "-l", self.ssh_user, "-i", str(self.identity_file),
                "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}",
                "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={self.known_hosts_file}",
                "-o", "GlobalKnownHostsFile=/dev/null"]

    def ssh_command(self, host: str, command: str) -> list[str]:
        """The argv that runs shell `command` on the host at address `host`."""
        return ["ssh", *self.ssh_options, host, command]

    def run(self, host_index: int, shell_command: str, *, timeout_s: float = 60) -> subprocess.CompletedProcess:
        """Runs `shell_command` on host `host_index` over ssh, as the launcher would; output is captured."""
        return _captured(self.ssh_command(self.addresses[host_index], shell_command), timeout_s)

    def exec_in(self, host_index: int, argv: Sequence[str], *, timeout_s: float = 60) -> subprocess.CompletedProcess:
        """Runs `argv` on host `host_index` without ssh, inside its namespaces (so it sees that host's workdir)."""
        enter = ["nsenter", f"--target={self.sshd_pids[host_index]}", "--net", "--mount", "--pid", "--"]
        return _captured([*enter, *argv], timeout_s)

    def cut(self, host_index: int) -> None:
        """Pulls host `host_index`'s cable: its link to the bridge goes down, its processes keep running."""
        _step(["ip", "link", "set", self.claims.links[host_index], "down"])

    def restore(self, host_index: int) -> None:
        """Plugs host `host_index`'s cable back in."""
        _step(["ip", "link", "set", self.claims.links[host_index], "up"])


@contextlib.contextmanager
def create_hosts(count: int, *, session_env: dict[str, str] | None = None) -> Iterator[NamespaceHosts]:
    """Builds `count` hosts, yields them, then kills everything in them and removes every trace.

    `session_env` is set in every ssh session on the hosts (sshd's SetEnv), e.g. a pip index they cannot reach.

    Skips the test (fails it under CI=true; never falls back to the real network) when this machine cannot
    build them; raises HostSetupError when teardown leaves anything behind.
    """
    _skip_unless_possible()
    claims = Claims.new(count)
    try:
        with contextlib.ExitStack() as teardown:
            yield _build(claims, teardown, session_env or {})
    finally:
        left = leftovers(claims)
        if left:
            raise HostSetupError(f"teardown left {'; '.join(left)}: remove them by hand (ip netns del, "
                                 "ip link del, kill, umount, rm -r) and report the bug")


def leftovers(claims: Claims) -> list[str]:
    """What hosts with these claims left on this machine: namespaces, links, processes, mounts, directories."""
    namespaces = set(_step(["ip", "netns", "list"]).split())
    links = set(re.findall(r"^\d+: ([^:@]+)", _step(["ip", "-o", "link", "show"]), re.MULTILINE))
    found = [f"namespace {name}" for name in claims.namespaces if name in namespaces]
    found += [f"link {name}" for name in (claims.bridge, *claims.links) if name in links]
    found += [f"process {line}" for path in (claims.state_dir, claims.workdir)
              for line in processes_mentioning(str(path))]
    found += [f"mount of {claims.workdir} in pid {pid}" for pid in _pids_mounting(claims.workdir)]
    found += [f"directory {path}" for path in (claims.workdir, claims.state_dir) if path.exists()]
    return found


def skip_or_fail(reason: str) -> None:
    """Skips the test because this machine cannot build what it needs; under CI (CI=true) fails it instead."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: a test that cannot build its hosts fails rather than skips)")
    pytest.skip(reason)


def _skip_unless_possible() -> None:
    if os.geteuid() != 0:
        skip_or_fail("multi-host tests need root (network namespaces, veth, sshd): run `sh tests/run.sh -m "
                    "multihost` as root")
    missing = [command for command in NEEDED_COMMANDS if shutil.which(command) is None]
    if missing:
        skip_or_fail(f"multi-host tests need {', '.join(missing)}: run `sh tests/system_packages.sh` as root")


def _build(claims: Claims, teardown: contextlib.ExitStack, session_env: dict[str, str]) -> NamespaceHosts:
    claims.state_dir.mkdir(mode=0o700)
    teardown.callback(shutil.rmtree, claims.state_dir)
    identity = sshkeys.generate_key(claims.state_dir / "id_ed25519", "pscluster-launcher")
    authorized_keys = sshkeys.write_authorized_keys(claims.state_dir / "authorized_keys", identity)
    subnet = _create_bridge(claims.bridge, teardown)
    claims.workdir.mkdir(mode=0o755)
    teardown.callback(shutil.rmtree, claims.workdir)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    addresses = tuple(f"{subnet}.{FIRST_HOST_OCTET + i}" for i in range(len(claims.namespaces)))
    host_keys = [sshkeys.generate_key(claims.state_dir / f"host{i}_ed25519", f"pscluster-host{i}")
                 for i in range(len(addresses))]
    sshd_pids = []
    for i, address in enumerate(addresses):
        _create_namespace(claims.namespaces[i], claims.links[i], claims.bridge, address, teardown)
        sshd_pids.append(_start_sshd(claims, i, address, host_keys[i], authorized_keys, session_env, teardown))
    known_hosts = sshkeys.write_known_hosts(claims.state_dir / "known_hosts", zip(addresses, host_keys, strict=True))
    hosts = NamespaceHosts(addresses=addresses, launcher_address=f"{subnet}.1", identity_file=identity,
                           known_hosts_file=known_hosts, ssh_user="root", sshd_pids=tuple(sshd_pids), claims=claims)
    _check_logins(hosts)
    return hosts


def _create_bridge(bridge: str, teardown: contextlib.ExitStack) -> str:
    """Creates `bridge` with the launcher address of a free subnet on it; returns the subnet's first 3 octets."""
    _step(["ip", "link", "add", bridge, "type", "bridge"], skip_on_failure=True)  # needs CAP_NET_ADMIN
    teardown.callback(_step, ["ip", "link", "del", bridge])
    with _locked(SUBNET_LOCK, timeout_s=30):  # parallel runs must not pick the same subnet
        subnet = _free_subnet()
        _step(["ip", "addr", "add", f"{subnet}.1/24", "dev", bridge])
    _step(["ip", "link", "set", bridge, "up"])
    return subnet


def _free_subnet() -> str:
    in_use = _step(["ip", "-4", "-o", "addr", "show"]) + _step(["ip", "-4", "route", "show", "table", "all"])
    taken = set(re.findall(re.escape(SUBNET_PREFIX) + r"\.(\d+)\.", in_use))
    for k in range(256):
        if str(k) not in taken:
            return f"{SUBNET_PREFIX}.{k}"
    raise HostSetupError(f"every {SUBNET_PREFIX}.x.0/24 is in use; delete stale test bridges (`ip link show "
                         "type bridge`, `ip link del NAME`)")


@contextlib.contextmanager
def _locked(path: Path, *, timeout_s: float) -> Iterator[None]:
    with open(path, "a") as lock:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise HostSetupError(f"{path} stayed locked for {timeout_s} s; is a test run hanging?") from None
                time.sleep(0.05)
        yield


def _create_namespace(namespace: str, link: str, bridge: str, address: str, teardown: contextlib.ExitStack) -> None:
    """A namespace whose eth0 (with `address`) is plugged into `bridge` through the veth `link`."""
    _step(["ip", "netns", "add", namespace], skip_on_failure=True)
    teardown.callback(_step, ["ip", "netns", "del", namespace])
    _step(["ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", namespace])
    # deleted explicitly: a deleted namespace takes its end of the veth, and so both, only later, in a kernel worker
    teardown.callback(_step, ["ip", "link", "del", link])
    _step(["ip", "link", "set", link, "master", bridge, "up"])
    for command in (["addr", "add", f"{address}/24", "dev", "eth0"], ["link", "set", "eth0", "up"],
                    ["link", "set", "lo", "up"]):
        _step(["ip", "-n", namespace, *command])


def _start_sshd(claims: Claims, index: int, address: str, host_key: Path, authorized_keys: Path,
                session_env: dict[str, str], teardown: contextlib.ExitStack) -> int:
    """Starts host `index`'s sshd in new mount and pid namespaces, with the workdir as a private tmpfs.

    Returns sshd's pid as the launcher sees it (inside, sshd is pid 1 and reaps what the launcher starts).
    """
    namespace = claims.namespaces[index]
    options = {"ListenAddress": address, "HostKey": host_key, "AuthorizedKeysFile": authorized_keys,
               "PermitRootLogin": "prohibit-password", "PasswordAuthentication": "no",
               "KbdInteractiveAuthentication": "no", "StrictModes": "no", "UsePAM": "no",
               "PidFile": claims.state_dir / f"sshd{index}.pid", "Subsystem": "sftp internal-sftp"}
    if session_env:
        options["SetEnv"] = " ".join(f"{name}={value}" for name, value in session_env.items())
    sshd = [SSHD, "-D", "-e", "-f", "/dev/null", *(f"-o{key}={value}" for key, value in options.items())]
    workdir = shlex.quote(str(claims.workdir))
    script = f"mount -t tmpfs -o mode=0755,size={WORKDIR_SIZE} tmpfs {workdir} && exec {shlex.join(sshd)}"
    unshare = ["unshare", "--mount", "--propagation=private", "--pid", "--fork", "--kill-child", "--mount-proc"]
    log_path = claims.state_dir / f"sshd{index}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(["ip", "netns", "exec", namespace, *unshare, "sh", "-c", script],
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    teardown.callback(_kill_everything_in, namespace, process)
    if not wait_for_line(log_path, f"Server listening on {address} port 22", timeout_s=10, process=process):
        raise HostSetupError(f"sshd on {namespace} did not start: {log_path.read_text().strip()!r}")
    return _only_child(process.pid)


def _only_child(pid: int) -> int:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    if len(children) != 1:
        raise HostSetupError(f"expected unshare (pid {pid}) to have one child, sshd; it has {children}")
    return int(children[0])


def _check_logins(hosts: NamespaceHosts) -> None:
    """Logs in to every host at once, proving keys, known_hosts and routes before any test relies on them."""
    logins = [subprocess.Popen(hosts.ssh_command(address, "true"), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for address in hosts.addresses]
    for address, login in zip(hosts.addresses, logins, strict=True):
        output, _ = login.communicate(timeout=STEP_TIMEOUT_S)
        if login.returncode != 0:
            raise HostSetupError(f"ssh to {address} failed ({output.strip()}); sshd's log is in "
                                 f"{hosts.claims.state_dir}")


def _kill_everything_in(namespace: str, process: subprocess.Popen) -> None:
    """SIGKILLs every process in `namespace` (sshd and all started through it) until none is left."""
    deadline = time.monotonic() + 10
    while pids := [int(pid) for pid in _step(["ip", "netns", "pids", namespace]).split()]:
        if time.monotonic() > deadline:
            raise HostSetupError(f"processes {pids} in {namespace} survived SIGKILL for 10 s")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    process.wait(timeout=10)


def _pids_mounting(path: Path) -> list[str]:
    """Pids of processes whose mount table has a mount at `path`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            mounts = (entry / "mountinfo").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        if any(line.split()[4] == str(path) for line in mounts.splitlines()):
            found.append(entry.name)
    return found


def _step(argv: list[str], *, skip_on_failure: bool = False) -> str:
    """Runs one setup or teardown command and returns its output; a failure skips or raises, as asked."""
    result = _captured(argv, STEP_TIMEOUT_S)
    if result.returncode == 0:
        return result.stdout
    message = f"`{shlex.join(argv)}` failed: {result.stderr.strip()}"
    if skip_on_failure:
        skip_or_fail(f"this machine cannot build test hosts in network namespaces: {message}")
    raise HostSetupError(message)


def _captured(argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
