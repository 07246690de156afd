"""The agent kept running for a launcher's looks at a host (launcher/backends/ssh/session.py), run here through a shell
as ssh runs it there: one process answers every look, a silent one makes the host unreachable within the timeout and
is killed, ssh's own failure is the host's, an agent that ends is the agent's, one ended between looks is started
again, and a host a reload drops keeps none."""

from __future__ import annotations

import json
import os
import shlex
import signal

import pytest

from clusterkit import PYTHON, ROOT, cluster_document, processes_mentioning, wait_until, write_cluster
from launcher.backends.base import AgentFailed, HostUnreachable
from launcher.backends.ssh.session import AgentSession


def _agents(tmp_path, timeout_s: float = 30) -> AgentSession:
    """A session whose command is what ssh runs on the host: cd to the workdir, the agent's status_lines."""
    cluster = write_cluster(tmp_path, cluster_document(logs_dir=str(tmp_path / "logs")))
    agent = [PYTHON, "-m", "launcher.agent", "status_lines", "--cluster", str(cluster)]
    remote = f"cd {shlex.quote(str(ROOT))} && {shlex.join(agent)}"
    return AgentSession("here", ["sh", "-c", remote], timeout_s=timeout_s)


def _agent_pids(tmp_path) -> list[int]:
    return [int(line.split(":")[0]) for line in processes_mentioning(str(tmp_path)) if "launcher.agent" in line
            and not line.split(": ", 1)[1].startswith("sh ")]


def test_one_agent_answers_every_look_and_ends_with_the_session(tmp_path):
    session = _agents(tmp_path)
    try:
        first = json.loads(session.ask("ps:0,worker:1"))
        (pid,) = _agent_pids(tmp_path)
        second = json.loads(session.ask("chief:0"))
        assert _agent_pids(tmp_path) == [pid]  # the same process, not one a look
        assert [row["task"] for row in first] == ["ps:0", "worker:1"] and not any(row["running"] for row in first)
        assert [row["task"] for row in second] == ["chief:0"]
        assert "error" in json.loads(session.ask("nope:0"))  # said as an answer: the launcher ends the run on it
        assert _agent_pids(tmp_path) == [pid]
    finally:
        session.close()
    assert processes_mentioning(str(tmp_path)) == []


def test_a_silent_agent_makes_the_host_unreachable_and_is_left_then_the_next_look_starts_another(tmp_path):
    session = _agents(tmp_path, timeout_s=2)
    pid = None
    try:
        session.ask("ps:0")
        (pid,) = _agent_pids(tmp_path)
        os.kill(pid, signal.SIGSTOP)  # a host that no longer answers
        with pytest.raises(HostUnreachable, match=r"^here: no answer over ssh within 2 s$"):
            session.ask("ps:0")
        assert [line for line in processes_mentioning(str(tmp_path)) if ": sh -c" in line] == []  # its ssh, killed
        os.kill(pid, signal.SIGCONT)  # the host back: its agent reads the end of its input and ends
        assert wait_until(lambda: not _agent_pids(tmp_path), 10), processes_mentioning(str(tmp_path))
        assert json.loads(session.ask("ps:0"))[0]["task"] == "ps:0"
        assert len(_agent_pids(tmp_path)) == 1
    finally:
        if pid is not None and pid in _agent_pids(tmp_path):
            os.kill(pid, signal.SIGCONT)
        session.close()
    assert processes_mentioning(str(tmp_path)) == []


def test_an_agent_ended_between_looks_is_started_again_without_calling_the_host_lost(tmp_path):
    session = _agents(tmp_path)
    try:
        session.ask("ps:0")
        (pid,) = _agent_pids(tmp_path)
        os.kill(pid, signal.SIGKILL)  # a reload, a signal: not a sign of the host
        assert wait_until(lambda: not _agent_pids(tmp_path), 10)
        assert wait_until(lambda: session._process.poll() is not None, 10)
        assert json.loads(session.ask("ps:0"))[0]["task"] == "ps:0"
    finally:
        session.close()


def test_ssh_failing_is_the_hosts_failure_and_an_agent_that_ends_is_the_agents(tmp_path):
    refusing = "echo 'ssh: connect to host far port 22: Connection refused' >&2; exit 255"
    refused = AgentSession("far", ["sh", "-c", refusing], timeout_s=30)
    with pytest.raises(HostUnreachable, match=r"^far: ssh: connect to host far port 22: Connection refused$"):
        refused.ask("ps:0")
    broken = AgentSession("far", ["sh", "-c", "read line; echo 'ModuleNotFoundError: no launcher' >&2; exit 1"],
                          timeout_s=30)
    with pytest.raises(AgentFailed, match=r"^far: the agent's status session ended with exit code 1: "
                                          r"ModuleNotFoundError: no launcher$"):
        broken.ask("ps:0")


def test_a_host_that_leaves_at_a_reload_keeps_no_agent(tmp_path):
    """The reload's host bookkeeping (launcher/reload.py) with a real agent session: the one of a host the new file
    no longer names ends with the reload, not with the launcher."""
    from cluster import config as cluster_config
    from launcher import reload
    from launcher.backends import backends_for

    far = "10.200.0.9"  # never reached: its session runs the agent here
    before = cluster_document(workers=1, ps=1, evaluator=False, logs_dir=str(tmp_path / "logs"))
    before["cluster"]["ps"] = [f"{far}:2222"]
    before["hosts"] = {far: {"ssh_user": "nobody", "workdir": str(tmp_path), "python": PYTHON}}
    old = cluster_config.load(write_cluster(tmp_path, before, "old.json"))
    after = cluster_document(workers=1, ps=1, evaluator=False, logs_dir=str(tmp_path / "logs"))
    new = cluster_config.load(write_cluster(tmp_path, after, "new.json"))

    class Watching:  # what _take_hosts reads of the supervisor
        config, hosts, say = old, backends_for(old), print

    watching = Watching()
    watching.hosts[far].session = _agents(tmp_path)
    watching.hosts[far].session.ask("ps:0")
    assert len(_agent_pids(tmp_path)) == 1
    reload._take_hosts(watching, new)
    assert far not in watching.hosts and _agent_pids(tmp_path) == []
