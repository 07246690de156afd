"""The launcher across real hosts (network namespaces with sshd, no shared filesystem): run, lose a host, firewall.

Layout: the chief and evaluator on the launcher's own address; ps:0 on host 0; ps:1 and worker:0 on host 1;
worker:1 on host 2; host 3 is outside the cluster. Every host sees its workdir (where logs and outputs go) as
a private tmpfs, so checkpoints can only be on the chief's disk if the chief writes them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

import netns
from clusterkit import ROOT, free_ports, processes_mentioning, wait_for_line, write_cluster

pytestmark = [pytest.mark.multihost, pytest.mark.cluster]
PYTHON = str(ROOT / ".venv" / "bin" / "python")  # the venv's own path: resolving it would lose the venv


@pytest.fixture(scope="module")
def hosts():
    with netns.create_hosts(4) as made:
        yield made


def cluster_file(hosts, directory, *, training=None, firewall=False):
    """A cluster file whose logs and outputs go to a folder of this test's own inside every host's workdir."""
    h = hosts.addresses
    ports = iter(free_ports(6))
    workdir = str(hosts.workdir)
    run_dir = f"{workdir}/{directory.name}"
    document = {
        "cluster": {"chief": [f"{hosts.launcher_address}:{next(ports)}"],
                    "worker": [f"{h[1]}:{next(ports)}", f"{h[2]}:{next(ports)}"],
                    "ps": [f"{h[0]}:{next(ports)}", f"{h[1]}:{next(ports)}"],
                    "evaluator": [f"{hosts.launcher_address}:{next(ports)}"]},
        "hosts": {address: {"ssh_user": hosts.ssh_user, "workdir": workdir, "python": PYTHON}
                  for address in h[:3]},
        # poll_s: the launcher's default, as in test_multihost_cuts.reached_over_ssh (an ssh call per host per look)
        "launcher": {"logs_dir": f"{run_dir}/logs", "ssh_identity": str(hosts.identity_file),
                     "ssh_known_hosts": str(hosts.known_hosts_file), "ssh_host_keys": "strict",
                     "ssh_connect_timeout_s": 3, "restart_backoff_s": 0.5},
        "training": {"output_dir": f"{run_dir}/output", "lr_decay_epochs": [], **(training or {})},
        "evaluation": {"poll_s": 0.5, "idle_timeout_s": 300},
        "security": {"firewall": firewall},
    }
    return write_cluster(directory, document)


def sh(*args, timeout_s=900):
    return subprocess.run(["sh", *args], capture_output=True, text=True, timeout=timeout_s, cwd=ROOT,
                          stdin=subprocess.DEVNULL)


def test_full_run_across_hosts_keeps_checkpoints_on_the_chief(hosts, tmp_path):
    path = cluster_file(hosts, tmp_path, training={"epochs": 2})
    result = sh(str(ROOT / "run.sh"), str(path))
    try:
        assert result.returncode == 0, result.stderr[-5000:]
        output = hosts.workdir / tmp_path.name / "output"  # the launcher's (and chief's) own view of the workdir
        assert json.loads((output / "summary.json").read_text())["status"] == "complete"
        assert (output / "model" / "model.h5").exists() and (output / "best_model" / "best.json").exists()
        assert sorted(p.name for p in (output / "checkpoints").glob("*.index")) == ["ckpt-1.index", "ckpt-2.index"]
        for index in (0, 1):  # the ps hosts hold no checkpoint shard: everything went through the chief
            listing = hosts.run(index, f"ls {hosts.workdir}/{tmp_path.name}/output 2>&1 || true")
            assert "No such file" in listing.stdout, listing.stdout
        logs = hosts.workdir / tmp_path.name / "logs"
        fetched = sorted(p.name for p in logs.glob("*.log"))
        assert {"ps-0.log", "ps-1.log", "worker-0.log", "worker-1.log"} <= set(fetched)
        assert "ready: ps listening" in (logs / "ps-0.log").read_text()
    finally:
        sh(str(ROOT / "kill.sh"), str(path))
    assert processes_mentioning(str(path)) == []


def test_worker_host_cut_off_training_goes_on(hosts, tmp_path):
    training = {"epochs": 2, "steps_per_epoch": 600, "steps_per_execution": 1}
    path = cluster_file(hosts, tmp_path, training=training)
    logs = hosts.workdir / tmp_path.name / "logs"
    started = sh(str(ROOT / "run.sh"), "--detach", str(path))
    assert started.returncode == 0, started.stderr
    try:
        assert wait_for_line(logs / "chief-0.log", "train | epoch 1/2", 300), (logs / "launcher.log").read_text()
        hosts.cut(2)
        assert wait_for_line(logs / "launcher.log", "worker:1; training goes on with worker:0", 60)
        deadline = time.monotonic() + 30  # status.json is written later in the pass that logged the loss
        while not shows_lost(status := sh(str(ROOT / "run.sh"), "status", str(path)).stdout, "worker:1"):
            assert time.monotonic() < deadline, status
            time.sleep(0.5)
        stalled = "TensorFlow has not advanced"
        if first_line_of(logs / "launcher.log", ("chief:0 finished", stalled), 600) == stalled:
            # TensorFlow stalled without the worker, and said so: the chief is held until the host is back
            hosts.restore(2)
            assert wait_for_line(logs / "launcher.log", "chief:0 finished", 600), (logs / "launcher.log").read_text()
        summary = json.loads((hosts.workdir / tmp_path.name / "output" / "summary.json").read_text())
        assert summary["status"] == "complete"
    finally:
        hosts.restore(2)
        time.sleep(1)
        sh(str(ROOT / "kill.sh"), str(path))
    assert processes_mentioning(str(path)) == []
    assert "roles.server" not in hosts.run(2, "ps -eo args").stdout


def shows_lost(status: str, task: str) -> bool:
    return any(line.startswith(task) and " lost " in line for line in status.splitlines())


def first_line_of(path, texts, timeout_s: float) -> str | None:
    """Which of `texts` shows up first in the file at `path` (None after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [text for text in texts if text in path.read_text(errors="replace")]
        if found:
            return found[0]
        time.sleep(0.5)
    return None


CONNECT = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3); print('open')"


def test_firewall_keeps_outsiders_off_the_ps_port(hosts, tmp_path):
    path = cluster_file(hosts, tmp_path, firewall=True)
    launcher = [sys.executable, "-m", "roles.launch"]
    ps_host, ps_port = hosts.addresses[0], json.loads(path.read_text())["cluster"]["ps"][0].split(":")[1]
    up = subprocess.run([*launcher, "up", str(path)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        member = hosts.exec_in(1, [PYTHON, "-c", CONNECT, ps_host, ps_port])
        outsider = hosts.exec_in(3, [PYTHON, "-c", CONNECT, ps_host, ps_port])
        assert member.stdout.strip() == "open", member.stderr
        assert outsider.returncode != 0 and "open" not in outsider.stdout
    finally:
        down = subprocess.run([*launcher, "down", str(path)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert f"firewall on {ps_host} removed" in down.stderr, down.stderr
    assert "pscluster_" not in hosts.exec_in(0, ["nft", "list", "tables"]).stdout
