"""What a multi-host run leaves where: outputs and user files survive later runs, the summary is the chief's host's,
and failures before anything starts say the cause and the fix.

Layout: chief and evaluator on host 0, ps:0 on host 1, worker:0 on host 2; the launcher runs no task itself.
Every ssh session on these hosts gets a pip index that refuses connections (sshd's SetEnv), so a relative
`python` cannot be bootstrapped there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

import netns
from cluster import config as cluster_config
from clusterkit import ROOT, free_ports, processes_mentioning, write_cluster
from launcher.backends import backends_for
from launcher.backends.ssh.commands import CONTROL_PATH

pytestmark = [pytest.mark.multihost, pytest.mark.cluster]
PYTHON = str(ROOT / ".venv" / "bin" / "python")
BOGUS_INDEX = "http://127.0.0.1:9/simple/"  # each host's own loopback: nothing listens there
USER_MODEL = """import tf_keras


def build(input_shape, num_classes):
    return tf_keras.Sequential([tf_keras.layers.Input(input_shape), tf_keras.layers.Flatten(),
                                tf_keras.layers.Dense(num_classes, activation="softmax")])
"""


@pytest.fixture(scope="module")
def hosts():
    index = {"PIP_CONFIG_FILE": "/dev/null", "PIP_INDEX_URL": BOGUS_INDEX, "PIP_RETRIES": "0"}  # refused at once
    with netns.create_hosts(3, session_env=index) as made:
        yield made


def cluster_file(hosts, directory, name, *, output_dir, logs, training=None, hosts_extra=None, launcher=None,
                 firewall=False):
    """Chief and evaluator on host 0, ps on host 1, worker on host 2; `output_dir` as given (relative: in the
    chief host's workdir), logs in `logs` under this test's folder of the workdir."""
    h, ports = hosts.addresses, iter(free_ports(4))
    workdir = str(hosts.workdir)
    document = {
        "cluster": {"chief": [f"{h[0]}:{next(ports)}"], "worker": [f"{h[2]}:{next(ports)}"],
                    "ps": [f"{h[1]}:{next(ports)}"], "evaluator": [f"{h[0]}:{next(ports)}"]},
        "hosts": {address: {"ssh_user": hosts.ssh_user, "workdir": workdir, "python": PYTHON,
                            **(hosts_extra or {}).get(address, {})} for address in h},
        # poll_s: the launcher's default, as in test_multihost_cuts.reached_over_ssh (an ssh call per host per look)
        "launcher": {"logs_dir": f"{workdir}/{directory.name}/{logs}", "ssh_identity": str(hosts.identity_file),
                     "ssh_known_hosts": str(hosts.known_hosts_file), "ssh_host_keys": "strict",
                     "ssh_connect_timeout_s": 3, "restart_backoff_s": 0.5, **(launcher or {})},
        "training": {"output_dir": output_dir, "epochs": 1, "steps_per_epoch": 20, "lr_decay_epochs": [],
                     **(training or {})},
        "evaluation": {"poll_s": 0.5, "idle_timeout_s": 120},
        "security": {"firewall": firewall},
    }
    return write_cluster(directory, document, name)


def launch(*args, timeout_s=600):
    return subprocess.run([sys.executable, "-m", "roles.launch", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout_s, cwd=ROOT, stdin=subprocess.DEVNULL)


def on_host(hosts, index, command):
    return hosts.run(index, command).stdout


@pytest.fixture
def user_package():
    """A user's model package in the project directory (removed afterwards): it must reach the chief's host."""
    package = ROOT / f"pscluster_user_models_{os.getpid()}"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "small.py").write_text(USER_MODEL)
    try:
        yield package.name
    finally:
        shutil.rmtree(package)


def test_outputs_logs_and_user_files_survive_the_next_run(hosts, tmp_path, user_package):
    workdir = hosts.workdir
    hosts.run(0, f"mkdir -p {workdir}/datasets {workdir}/{user_package} && echo mine > {workdir}/notes.txt && "
                 f"echo data > {workdir}/datasets/part-0 && echo remote > {workdir}/{user_package}/remote_only.py")
    first = cluster_file(hosts, tmp_path, "first.json", output_dir="results-a", logs="logs-a")
    second = cluster_file(hosts, tmp_path, "second.json", output_dir="results-b", logs="logs-b",
                          training={"model": f"{user_package}.small:build"})
    try:
        run_a = launch("run", first)
        assert run_a.returncode == 0, run_a.stderr[-5000:]
        run_b = launch("run", second)
        assert run_b.returncode == 0, run_b.stderr[-5000:]
    finally:
        for path in (first, second):
            launch("down", path)
    kept = ["results-a/model/model.h5", "results-a/summary.json", "results-a/best_model/best.json",
            "results-b/model/model.h5", "notes.txt", "datasets/part-0", f"{user_package}/remote_only.py",
            f"{user_package}/small.py", f"{tmp_path.name}/logs-a/chief-0.log"]
    listing = on_host(hosts, 0, f"cd {workdir} && ls {' '.join(kept)}")
    assert listing.split() == sorted(kept), listing
    h0 = hosts.addresses[0]
    assert f"model: {h0}:{workdir}/results-b/model/model.h5" in run_b.stderr, run_b.stderr[-3000:]
    assert f"in {h0}:{workdir}/results-b/best_model" in run_b.stderr, run_b.stderr[-3000:]
    events = workdir / tmp_path.name / "logs-b" / "tensorboard"  # the launcher's own disk
    assert f"tensorboard --logdir {events}" in run_b.stderr
    assert list((events / "train").glob("events.out.tfevents.*")), "train events were not brought back"
    assert list((events / "validation").glob("events.out.tfevents.*")), "validation events were not brought back"
    assert not (ROOT / "results-a").exists() and not (ROOT / "results-b").exists()
    assert processes_mentioning(str(first)) == [] and processes_mentioning(str(second)) == []


def test_unreachable_package_index_is_the_one_cause_shown_and_nothing_is_left(hosts, tmp_path):
    h1 = hosts.addresses[1]
    path = cluster_file(hosts, tmp_path, "cluster.json", output_dir="results", logs="logs",
                        hosts_extra={h1: {"python": ".venv/bin/python"}})
    result = launch("run", path)
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"the package index {BOGUS_INDEX} is unreachable from {h1}" in result.stderr, result.stderr[-3000:]
    assert "mirror" in result.stderr and len(errors) == 1, errors
    for noise in ("not stopped", "not removed", "ModuleNotFoundError", "Traceback", "No matching distribution"):
        assert noise not in result.stderr, result.stderr[-3000:]
    assert "No such file" in hosts.run(1, f"ls {hosts.workdir}/.venv 2>&1 || true").stdout
    status = launch("status", path).stdout
    assert "before any task started" in status, status
    assert all(" not started " in line for line in status.splitlines()[2:] if line.strip()), status


def test_unknown_host_key_under_strict_names_the_fix_and_nothing_else(hosts, tmp_path):
    known = tmp_path / "known_hosts"
    h2 = hosts.addresses[2]
    known.write_text("".join(line + "\n" for line in hosts.known_hosts_file.read_text().splitlines()
                             if not line.startswith(h2)))
    path = cluster_file(hosts, tmp_path, "cluster.json", output_dir="results", logs="logs", firewall=True,
                        launcher={"ssh_known_hosts": str(known)})
    subprocess.run(["ssh", "-O", "exit", "-o", f"ControlPath={CONTROL_PATH}", "-l", hosts.ssh_user, h2],
                   capture_output=True, timeout=30)  # an earlier test's shared connection would skip the key check
    result = launch("run", path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"ssh-keyscan -p 22 {h2} >> {known}" in result.stderr, result.stderr
    for noise in ("not stopped", "not removed", "exposed"):
        assert noise not in result.stderr, result.stderr


def test_print_config_shows_the_cluster_file_remote_tasks_read(hosts, tmp_path):
    path = cluster_file(hosts, tmp_path, "cluster.json", output_dir="results", logs="logs")
    shown = launch("print_config", path).stdout
    assert f"--cluster {hosts.workdir}/.pscluster/cluster.json" in shown, shown
    assert str(path) not in shown


def _host_backend(path, address):
    """The launcher's ssh backend for one host of the cluster file at `path`, prepared as a run prepares it."""
    config = cluster_config.load(str(path))
    host = backends_for(config)[address]
    host.prepare(lambda line: None)
    return config, host


def test_a_host_copies_back_only_its_own_tasks_logs(hosts, tmp_path):
    path = cluster_file(hosts, tmp_path, "cluster.json", output_dir="results", logs="logs")
    config, host = _host_backend(path, hosts.addresses[2])  # worker:0's host
    local = config.path(config.launcher.logs_dir)
    local.mkdir(parents=True, exist_ok=True)
    assert not host.shares_logs_dir  # the workdir, and the logs in it, are the host's own
    hosts.run(2, f"mkdir -p {local} && cd {local} && echo 'worker line' > worker-0.log && echo 0 > worker-0.exit && "
                 "echo stale > ps-0.log")
    (local / "ps-0.log").write_text("ps:0's copy from its own host\n")
    host.fetch_logs()
    assert (local / "worker-0.log").read_text() == "worker line\n"
    assert (local / "worker-0.exit").read_text() == "0\n"
    assert (local / "ps-0.log").read_text() == "ps:0's copy from its own host\n"  # not another host's stale file


def test_a_host_that_shares_the_logs_directory_never_copies_over_files_being_written(hosts, tmp_path):
    """On one filesystem (NFS, or these hosts' shared /tmp) a copy of a log onto itself replaced the file while a
    task or the launcher appended to it, and what they wrote after went to a file no one could open."""
    path = cluster_file(hosts, tmp_path, "cluster.json", output_dir="results", logs="logs",
                        launcher={"logs_dir": str(tmp_path / "shared-logs")})
    config, host = _host_backend(path, hosts.addresses[2])
    assert host.shares_logs_dir
    log = tmp_path / "shared-logs" / "worker-0.log"
    log.parent.mkdir(exist_ok=True)
    stop = threading.Event()
    with open(log, "a", buffering=1) as task_output:
        def write():
            while not stop.is_set():
                task_output.write("a line the task writes\n")
                time.sleep(0.0005)

        writer = threading.Thread(target=write)
        writer.start()
        try:
            for _ in range(40):
                host.fetch_logs()
        finally:
            stop.set()
            writer.join()
        assert os.fstat(task_output.fileno()).st_nlink == 1, "the task's log was replaced under it"
