"""Tasks forked from a process that imported TensorFlow once look, stop and end as started ones do."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

import forkedkit
from clusterkit import (PYTHON, ROOT, cluster_document, last_line_starting, run_python, start_module, wait_for_line,
                        write_cluster)
from cluster import config as cluster_config
from common import net
from common.proc import has_live_thread, proc_stat
from launcher import agent, process_search, task_forks

pytestmark = pytest.mark.cluster


def _wait(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout_s} s for {what}"
        time.sleep(0.1)


@pytest.fixture
def config(tmp_path, monkeypatch):
    """A one-ps cluster whose tasks this process forks from a fork server of its own (not the session's shared
    one, tests/conftest.py, which test_a_shared_fork_server... covers)."""
    monkeypatch.delenv(task_forks.SHARED_VARIABLE)
    document = cluster_document(workers=1, ps=1, evaluator=False, logs_dir=str(tmp_path / "logs"))
    yield cluster_config.load(write_cluster(tmp_path, document))
    task_forks.stop_all()


def _parent(pid: int) -> int:
    return int(proc_stat(pid)[1])


def test_a_forked_ps_serves_shows_its_own_command_and_environment_and_is_found_and_stopped_as_a_started_one(
        config):
    ps = config.task("ps", 0)
    pid = agent.start(config, ps, fork=True).pid
    try:
        assert _parent(pid) in {server.process.pid for server in task_forks._servers.values()}  # not this process
        _assert_a_started_tasks_look(config, ps, pid)
    finally:
        stopped = agent.stop(config, ps)
    assert stopped.pid == pid
    _wait(lambda: not has_live_thread(pid), 30, "the ps to end")
    assert agent.read_exit_code(config, ps) == 0  # it wrote its own exit code on SIGTERM


def _assert_a_started_tasks_look(config, ps, pid: int) -> None:
    assert os.getsid(pid) == pid and os.getpgid(pid) == pid  # a session of its own, as a started task
    log = agent.task_file(config, ps, "log")
    _wait(lambda: "ready: ps listening" in log.read_text(), 60, "the forked ps to say it is ready in its log")
    assert net.answers(ps.address.host, ps.address.port)
    shown = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert [part.decode() for part in shown if part] == list(agent.taskspec.task_command(config, ps))
    environment = dict(entry.decode().split("=", 1) for entry in Path(f"/proc/{pid}/environ").read_bytes()
                       .split(b"\0") if entry)
    assert environment["PSCLUSTER_EXIT_FILE"].endswith("ps-0.exit") and '"ps"' in environment["TF_CONFIG"]
    assert task_forks.ROOM_VARIABLE not in environment
    assert "[ps:0]" in log.read_text()  # its output is its own log
    agent.task_file(config, ps, "pid").unlink()  # as when the logs folder is deleted: found by its environment
    assert [record.pid for record in process_search.task_groups(agent.task_file(config, ps, "exit"))] == [pid]


def test_a_forked_task_that_fails_at_start_exits_2_with_one_line_in_its_log(config):
    ps = config.task("ps", 0)
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind((ps.address.host, ps.address.port))
        taken.listen()
        pid = agent.start(config, ps, fork=True).pid
        _wait(lambda: agent.read_exit_code(config, ps) is not None, 60, "the ps to end")
    assert agent.read_exit_code(config, ps) == 2
    log = agent.task_file(config, ps, "log").read_text()
    assert "is already in use" in log and "Traceback" not in log, log
    _wait(lambda: not has_live_thread(pid), 10, "the ended ps to be reaped")


def test_tasks_the_fork_server_cannot_take_are_started_and_it_ends_with_its_launcher(config, tmp_path):
    ps = config.task("ps", 0)
    files = {"log_path": tmp_path / "x.log", "pid_path": tmp_path / "x.pid"}
    command = agent.taskspec.task_command(config, ps)
    too_large = {**os.environ, "TF_CONFIG": "x" * (2 * task_forks.ROOM_BYTES)}  # its own part outgrows the room
    assert task_forks.start(command, cwd=Path.cwd(), env=too_large, **files) is None  # then started as before
    assert not files["pid_path"].exists()
    assert task_forks.start(["python", "-m", "coordinator.tf_free"], cwd=Path.cwd(), env=os.environ, **files) is None
    unopenable = {**files, "log_path": tmp_path}  # a folder: the child cannot become the task, and ends
    assert task_forks.start(command, cwd=Path.cwd(), env=os.environ, **unopenable) is None
    assert not files["pid_path"].exists()
    key = task_forks.server_key(command, Path.cwd(), os.environ)
    server = task_forks._servers[key].process
    assert server.poll() is None  # the server lives on for the next task
    server.stdin.close()  # what the launcher's end does to it
    _wait(lambda: server.poll() is not None, 10, "the fork server to end with its launcher")


def test_a_shared_fork_server_forks_the_tasks_of_every_process_given_its_socket_and_no_other(tmp_path, monkeypatch,
                                                                                           one_fork_server):
    config = cluster_config.load(write_cluster(tmp_path, cluster_document(
        workers=1, ps=1, evaluator=False, logs_dir=str(tmp_path / "logs"))))
    ps, worker = config.task("ps", 0), config.task("worker", 0)
    started = subprocess.run([PYTHON, "-c", "import sys, tensorflow; from cluster import config; "
                              "from launcher import agent; c = config.load(sys.argv[1]); "
                              "print(agent.start(c, c.task('ps', 0), fork=True).pid)",
                              str(config.source)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr[-3000:]
    pid = int(started.stdout.split()[-1])  # started by another process (one that imported TensorFlow) that has ended
    try:
        assert _parent(pid) == one_fork_server.process.pid
        _assert_a_started_tasks_look(config, ps, pid)
        monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")  # read on import: a task with another value is not its
        own = agent.start(config, worker, fork=True).pid
        assert _parent(own) in {server.process.pid for server in task_forks._servers.values()}
    finally:
        agent.stop(config, ps), agent.stop(config, worker)
        task_forks.stop_all()
    assert one_fork_server.alive()  # its clients' ends are not its own
    shared = task_forks.ForkServer(PYTHON, ROOT, {"PATH": os.environ["PATH"]}, shared=True)
    assert Path(shared.socket_path).is_socket()
    shared.process.stdin.close()  # what its owner's end does to it
    _wait(lambda: shared.process.poll() is not None, 10, "the shared fork server to end with its owner")
    shared.stop()
    assert not Path(shared.socket_path).parent.exists()


def test_a_module_a_test_starts_is_forked_by_the_shared_server_and_ends_with_a_started_ones_exit_status(
        tmp_path, one_fork_server):
    path = write_cluster(tmp_path, cluster_document(workers=1, ps=1, evaluator=False))
    ps = cluster_config.load(path).task("ps", 0)
    command = ("roles.server", "--role", "ps", "--index", "0", "--cluster", str(path))
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind((ps.address.host, ps.address.port))
        taken.listen()
        failing = start_module(*command, log_path=tmp_path / "failing.log")
        assert isinstance(failing, forkedkit.ForkedChild)
        assert _parent(failing.pid) == one_fork_server.process.pid
        assert failing.wait(timeout=60) == 2 and "is already in use" in (tmp_path / "failing.log").read_text()
    serving = start_module(*command, log_path=tmp_path / "serving.log")
    try:
        assert wait_for_line(tmp_path / "serving.log", "ready: ps listening", 60, serving)
        with pytest.raises(subprocess.TimeoutExpired):
            serving.wait(timeout=0.5)
    finally:
        serving.kill()
    assert serving.wait(timeout=30) == -9  # as subprocess gives a killed process's


HELPER = """
import json, os, sys
from pathlib import Path
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "path": sys.path[:2], "tf": "tensorflow" in sys.modules,
                  "config": os.environ.get("TF_CONFIG"), "parent": os.getppid(), "main": __name__}))
sys.exit(int(sys.argv[-1]))
"""


def test_a_tests_helper_script_or_code_runs_forked_as_the_interpreter_runs_it(tmp_path, one_fork_server):
    """clusterkit.run_python forks a test's TensorFlow helper from the shared server: a script sees its folder
    first on sys.path, `-c` code the current directory (then PYTHONPATH's), both their arguments, cwd, variables
    and exit code."""
    script = tmp_path / "helper" / "script.py"
    script.parent.mkdir()
    script.write_text(HELPER)
    ran = {}
    for name, args in (("script", [str(script)]), ("code", ["-c", HELPER])):
        done = run_python(*args, "a b", "3", env_changes={"TF_CONFIG": "{}", "PYTHONPATH": "/lib/x"},
                          cwd=tmp_path)
        assert done.returncode == 3, done.stdout[-2000:]
        ran[name] = json.loads(last_line_starting(done.stdout, "{"))
    for found in ran.values():
        assert found["tf"] and found["parent"] == one_fork_server.process.pid  # forked: TensorFlow imported
        assert found["argv"] == ["a b", "3"] and found["cwd"] == str(tmp_path) and found["config"] == "{}"
        assert found["main"] == "__main__"
    assert ran["script"]["path"] == [str(script.parent), "/lib/x"] and ran["code"]["path"] == ["", "/lib/x"]
    failing = run_python("-c", "raise ValueError('the helper failed')", cwd=tmp_path)
    assert failing.returncode == 1 and "ValueError: the helper failed" in failing.stderr
