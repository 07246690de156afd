"""Shared fixtures: one ps/worker cluster for the modules that ask, hosts per module; nothing may outlive a test."""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cpu_sampler  # noqa: E402
import lanes  # noqa: E402
import netns  # noqa: E402
from clusterkit import PYTHON, ROOT, cluster_document, processes_mentioning, write_cluster  # noqa: E402
from cluster import config as cluster_config, taskspec  # noqa: E402
from common import net  # noqa: E402
from common.graph_style import trace_toolkit_code_as_written  # noqa: E402
from common.proc import proc_stat  # noqa: E402
from launcher import task_forks  # noqa: E402
from launcher.supervisor import Supervisor  # noqa: E402


def pytest_collection_finish(session):
    """The tests trace the toolkit's functions as its processes do: as written, without AutoGraph's rewriting
    (common/graph_style.py). Said once the test modules are imported, before any test runs, and only when they
    imported TensorFlow: a pytest that needs none (tests/test_lanes.py runs a few) does not import it for this."""
    if "tensorflow" in sys.modules:
        trace_toolkit_code_as_written()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI (CI=true) a skipped test fails: a green run must prove the root-only tests really ran."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI") == "true" and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome, report.longrepr = "failed", f"skipped under CI=true, which must not happen: {reason}"


OWN_CPU = collections.Counter()  # this pytest's CPU-seconds by test module, for tests/cpu_sampler.py


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Sums this pytest's own CPU-seconds (every thread's: the tests that train in process, the polling of logs) by
    test module, which the sampler cannot tell apart from /proc."""
    started = time.process_time()
    yield
    OWN_CPU[item.path.name] += time.process_time() - started


def pytest_sessionfinish(session):
    out = os.environ.get(cpu_sampler.OWN_CPU_VARIABLE)  # the sampler's folder, when it runs this suite
    if out:
        lane = os.environ.get(lanes.LANE_VARIABLE, "-")
        OWN_CPU["(start, collection)"] = time.process_time() - sum(OWN_CPU.values())
        (Path(out) / f"{lane}.json").write_text(json.dumps({name: round(seconds, 1) for name, seconds in
                                                          OWN_CPU.most_common()}, indent=2))


def pytest_ignore_collect(collection_path, config):
    """Under tests/lanes.py, a test module none of this lane's tests can be in is not collected (nor imported)."""
    lane = os.environ.get(lanes.LANE_VARIABLE)
    if lane and collection_path.is_file() and collection_path.name.startswith("test_"):
        return None if lanes.may_hold_tests_of(lane, collection_path.name) else True
    return None


def pytest_collection_modifyitems(config, items):
    """The modules run in tests/lanes.py's `run_order` (those that mostly wait first, those on the shared servers
    last); under tests/lanes.py (PSCLUSTER_TEST_LANE set) only this lane's tests are kept."""
    sharing = {item.nodeid.split("::")[0] for item in items if "shared_servers" in item.fixturenames}
    items.sort(key=lambda item: lanes.run_order(item.path.name, item.nodeid.split("::")[0] in sharing))  # stable
    lane = os.environ.get(lanes.LANE_VARIABLE)
    if not lane:
        return
    mine = [lanes.in_lane(lane, item.get_closest_marker("multihost") is not None, item.path.name) for item in items]
    if not all(mine):
        config.hook.pytest_deselected(items=[item for item, keep in zip(items, mine) if not keep])
        items[:] = [item for item, keep in zip(items, mine) if keep]


@pytest.fixture(autouse=True)
def no_leftover_processes(tmp_path):
    """Fails the test that leaves a process behind which was started from its temporary directory. One already
    killed may take a moment to go: an exporter killed with its chief (PR_SET_PDEATHSIG) runs at niceness 10, and
    on a loaded machine was still listed as the test ended (CI, 2026-12-06); a live one stays past the wait."""
    yield
    leftovers = processes_mentioning(str(tmp_path))
    for _ in range(100):  # up to 10 s
        if not leftovers:
            return
        time.sleep(0.1)
        leftovers = processes_mentioning(str(tmp_path))
    assert not leftovers, f"processes left running: {[_with_state(line) for line in leftovers]}"


def _with_state(leftover: str) -> str:
    """`pid: command` with the process's state and parent (stat fields 3 and 4), to tell a stuck one from a
    slow one."""
    pid = leftover.split(":", 1)[0]
    fields = proc_stat(int(pid))
    if not fields:
        return f"{leftover.strip()} (gone since)"
    state, parent = fields[:2]
    return f"{leftover.strip()} (state {state}, parent {parent})"


class ServerPool:
    """2 ps and 2 workers on loopback, started by the launcher when a module first asks and kept for the next
    modules that ask (their tests run last, one module after another: see pytest_collection_modifyitems)."""

    def __init__(self, directory: Path):
        self.directory, self.supervisor = directory, None
        self.path = write_cluster(directory, cluster_document(evaluator=False, logs_dir=str(directory / "logs")))

    def ready(self) -> Path:
        """The cluster.json of servers that answer: started now if none run, or again if a test broke one."""
        if self.supervisor is not None and not all(net.answers(t.address.host, t.address.port)
                                                   for t in self.supervisor.config.tasks(("ps", "worker"))):
            print("shared servers: one stopped answering; starting them again")
            self.stop()
        if self.supervisor is None:
            self.supervisor = Supervisor(cluster_config.load(self.path), print)
            self.supervisor.start_servers()
        return self.path

    def stop(self) -> None:
        if self.supervisor is not None:
            self.supervisor.stop_everything()
            self.supervisor = None
        assert processes_mentioning(str(self.directory)) == []


@pytest.fixture(scope="session", autouse=True)
def one_fork_server(tmp_path_factory):
    """One fork server for the session's local tasks, in this process and every launcher it runs: each launcher run
    would otherwise import TensorFlow once more for its own (launcher/task_forks.py)."""
    config = cluster_config.load(write_cluster(tmp_path_factory.mktemp("forks"), cluster_document()))
    command = taskspec.task_command(config, config.task("ps", 0))
    shared_key = task_forks.server_key(command, ROOT, taskspec.task_environment(config, config.task("ps", 0),
                                                                                 os.environ))
    server = task_forks.ForkServer(PYTHON, ROOT, dict(shared_key[2]), shared=True)
    os.environ[task_forks.SHARED_VARIABLE] = server.socket_path
    try:
        yield server
    finally:
        del os.environ[task_forks.SHARED_VARIABLE]
        task_forks.stop_all()
        server.stop()


@pytest.fixture(scope="session")
def server_pool(tmp_path_factory):
    pool = ServerPool(tmp_path_factory.mktemp("cluster"))
    try:
        yield pool
    finally:
        pool.stop()


@pytest.fixture(scope="module")
def shared_servers(server_pool):
    """2 ps and 2 workers on loopback shared by the modules that ask (see ServerPool); yields the cluster.json path.

    Each chief a test runs against them makes its own variables on the ps, so tests and modules do not meet."""
    return server_pool.ready()


@pytest.fixture(scope="module")
def three_hosts():
    """Three hosts in network namespaces, each with sshd and a private workdir, shared by a module's tests."""
    with netns.create_hosts(3) as hosts:
        yield hosts
