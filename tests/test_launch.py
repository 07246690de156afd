"""run.sh and kill.sh as a user runs them: tasks come up, go down, and nothing is left behind."""

from __future__ import annotations

import subprocess

import pytest

from clusterkit import ROOT, cluster_document, processes_mentioning, write_cluster
from roles import config as cluster_config
from roles import probe

pytestmark = pytest.mark.cluster


def sh(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(ROOT / script), *args], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_run_then_kill_leaves_nothing(tmp_path):
    path = write_cluster(tmp_path, cluster_document(logs_dir=str(tmp_path / "logs")))
    servers = cluster_config.load(path).tasks(("ps", "worker"))
    up = sh("run.sh", str(path))
    assert up.returncode == 0, up.stderr
    assert "ready: ps:0, ps:1, worker:0, worker:1" in up.stderr
    assert probe.wait_until_listening(servers, timeout_s=5) == []
    assert sorted(p.name for p in (tmp_path / "logs").glob("*.pid")) == [
        "ps-0.pid", "ps-1.pid", "worker-0.pid", "worker-1.pid"]

    down = sh("kill.sh", str(path))
    assert down.returncode == 0, down.stderr
    assert down.stderr.count(": stopped") == 4, down.stderr
    assert processes_mentioning(str(path)) == []
    assert [t for t in servers if probe.answers(t.address.host, t.address.port)] == []

    again = sh("kill.sh", str(path))
    assert again.returncode == 0 and "nothing to stop" in again.stderr
