"""Hosts in network namespaces: ssh in batch mode, private workdirs, rsync, a TensorFlow server cut off, teardown."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess

import pytest

import netns
from clusterkit import ROOT, wait_until
from common.proc import start_ticks
from launcher.process import has_live_thread

pytestmark = pytest.mark.multihost

REMOTE_PYTHON = str((ROOT / ".venv").resolve() / "bin" / "python")  # hosts see it: only the workdir is private
PS_PORT = 2222
RAW_PS = ("import sys, tensorflow as tf; tf.distribute.Server(tf.train.ClusterSpec({'ps': [sys.argv[1]]}), "
          "job_name='ps', task_index=0).join()")
PROBE = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()"


def answers_launcher(hosts: netns.NamespaceHosts, address: str, port: int) -> bool:
    """True when `address`:`port` accepts a TCP connection from the launcher's address on the bridge."""
    try:
        with socket.create_connection((address, port), timeout=1, source_address=(hosts.launcher_address, 0)):
            return True
    except OSError:
        return False


def answers_host(hosts: netns.NamespaceHosts, host_index: int, address: str, port: int) -> bool:
    """True when `address`:`port` accepts a TCP connection from host `host_index`."""
    return hosts.exec_in(host_index, [REMOTE_PYTHON, "-c", PROBE, address, str(port)]).returncode == 0


def read_on(hosts: netns.NamespaceHosts, host_index: int, path) -> str:
    """The text of file `path` as host `host_index` sees it ('' while it does not exist)."""
    return hosts.exec_in(host_index, ["cat", str(path)]).stdout


def test_ssh_in_batch_mode_reaches_each_host_at_its_own_address(three_hosts):
    for index, address in enumerate(three_hosts.addresses):
        result = three_hosts.run(index, 'ip -4 -o addr show eth0 && echo "from $SSH_CONNECTION"')
        assert result.returncode == 0, result.stderr
        assert f"inet {address}/24" in result.stdout
        assert f"from {three_hosts.launcher_address} " in result.stdout


def test_ssh_refuses_a_host_whose_key_is_not_in_known_hosts(three_hosts):
    options = [option.replace(str(three_hosts.known_hosts_file), "/dev/null") for option in three_hosts.ssh_options]
    result = subprocess.run(["ssh", *options, three_hosts.addresses[0], "true"], capture_output=True, text=True,
                            timeout=30, stdin=subprocess.DEVNULL)
    assert result.returncode == 255
    assert "Host key verification failed" in result.stderr


def test_workdir_is_private_to_each_host_and_the_rest_is_shared(three_hosts):
    marker = three_hosts.workdir / "written-on-host-1"
    written = three_hosts.run(1, f"echo host1 > {marker} && findmnt -n -o FSTYPE {three_hosts.workdir}")
    assert written.stdout == "tmpfs\n", written.stderr
    try:
        assert read_on(three_hosts, 1, marker) == "host1\n"
        assert three_hosts.run(2, f"test -e {marker}").returncode == 1
        assert not marker.exists()
        assert three_hosts.run(2, f"test -x {REMOTE_PYTHON}").returncode == 0
    finally:
        three_hosts.run(1, f"rm -f {marker}")


def test_tensorflow_server_started_over_ssh_serves_other_hosts_until_cut_off(three_hosts, tmp_path):
    hosts = three_hosts
    project = hosts.workdir / "project"
    cluster = {"cluster": {"chief": [f"{hosts.addresses[0]}:{PS_PORT}"], "worker": [f"{hosts.addresses[2]}:{PS_PORT}"],
                           "ps": [f"{hosts.addresses[1]}:{PS_PORT}"]}}
    (tmp_path / "hosts-cluster.json").write_text(json.dumps(cluster))
    copy_project(hosts, 1, [f"{ROOT}/", str(tmp_path / "hosts-cluster.json")], project)
    pid = start_ps(hosts, 1, project)
    try:
        log = project / "ps-0.log"
        assert wait_until(lambda: "ready" in read_on(hosts, 1, log), timeout_s=90), read_on(hosts, 1, log)
        assert "[ps:0]" in read_on(hosts, 1, log)
        ps_address = hosts.addresses[1]
        assert answers_launcher(hosts, ps_address, PS_PORT)
        assert answers_host(hosts, 2, ps_address, PS_PORT)
        hosts.cut(1)
        assert not answers_launcher(hosts, ps_address, PS_PORT)
        assert not answers_host(hosts, 2, ps_address, PS_PORT)
        hosts.restore(1)
        assert wait_until(lambda: answers_launcher(hosts, ps_address, PS_PORT), timeout_s=10)
    finally:
        hosts.restore(1)
        stop_ps(hosts, 1, pid)


def copy_project(hosts: netns.NamespaceHosts, host_index: int, sources: list[str], destination) -> None:
    """rsync over the hosts' ssh, as the launcher will: the project without what .gitignore leaves out."""
    ssh = shlex.join(["ssh", *hosts.ssh_options])
    result = subprocess.run(["rsync", "-a", "--exclude=.git", "--exclude=.venv", "--filter=:- .gitignore", "-e", ssh,
                             *sources, f"{hosts.addresses[host_index]}:{destination}/"],
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    listing = hosts.run(host_index, f"cd {destination} && ls roles/server.py hosts-cluster.json").stdout.split()
    assert listing == ["hosts-cluster.json", "roles/server.py"]


def start_ps(hosts: netns.NamespaceHosts, host_index: int, project) -> str:
    """Starts ps 0 from the copied project on the host, detached from the ssh session; returns its pid there."""
    command = (f"cd {project} && {{ setsid {REMOTE_PYTHON} -m roles.server --role ps --index 0 "
               f"--cluster hosts-cluster.json > ps-0.log 2>&1 < /dev/null & }} && echo $!")
    result = hosts.run(host_index, command)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def stop_ps(hosts: netns.NamespaceHosts, host_index: int, pid: str) -> None:
    """SIGTERM, then up to 10 s for the process to be gone (the host's sshd, its pid 1, reaps it)."""
    wait = f"for i in $(seq 100); do kill -0 {pid} 2>/dev/null || exit 0; sleep 0.1; done; exit 1"
    assert hosts.run(host_index, f"kill {pid}; {wait}").returncode == 0


def test_teardown_kills_what_ran_on_the_hosts_and_leaves_no_namespace_link_or_mount():
    with netns.create_hosts(2) as hosts:
        server = f"{REMOTE_PYTHON} -c {shlex.quote(RAW_PS)} {hosts.addresses[0]}:{PS_PORT}"
        assert hosts.run(0, f"setsid {server} > /dev/null 2>&1 < /dev/null &").returncode == 0
        sleeper = f"setsid sleep 600 > /dev/null 2>&1 < /dev/null & touch {hosts.workdir}/file"
        assert hosts.run(1, sleeper).returncode == 0
        assert wait_until(lambda: answers_launcher(hosts, hosts.addresses[0], PS_PORT), timeout_s=90)
        started = {int(pid): start_ticks(int(pid)) for name in hosts.namespaces
                   for pid in command_output(["ip", "netns", "pids", name])}
        assert len(started) >= 2 * 3  # per host at least unshare, sshd and what we started
    assert netns.leftovers(hosts.claims) == []
    assert [pid for pid, at in started.items() if has_live_thread(pid) and start_ticks(pid) == at] == []
    assert not set(hosts.namespaces) & set(command_output(["ip", "netns", "list"]))
    for link in (hosts.claims.bridge, *hosts.claims.links):
        assert subprocess.run(["ip", "link", "show", link], capture_output=True, timeout=30).returncode != 0, link


def command_output(argv: list[str]) -> list[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout.split()


def test_hosts_that_cannot_be_built_skip_the_test_but_fail_it_under_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no bridge"):
        netns.skip_or_fail("no bridge")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no bridge.*CI=true"):
        netns.skip_or_fail("no bridge")
