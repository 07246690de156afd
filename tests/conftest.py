"""Shared fixtures: a real ps/worker cluster or real hosts per test module that asks; nothing may outlive a test."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import lanes  # noqa: E402
import netns  # noqa: E402
from clusterkit import cluster_document, processes_mentioning, write_cluster  # noqa: E402
from cluster import config as cluster_config  # noqa: E402
from launcher.supervisor import Supervisor  # noqa: E402


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI (CI=true) a skipped test fails: a green run must prove the root-only tests really ran."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI") == "true" and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome, report.longrepr = "failed", f"skipped under CI=true, which must not happen: {reason}"


def pytest_collection_modifyitems(config, items):
    """Under tests/lanes.py (PSCLUSTER_TEST_LANE set) keeps only this lane's tests."""
    lane = os.environ.get(lanes.LANE_VARIABLE)
    if not lane:
        return
    mine = [lanes.in_lane(lane, item.get_closest_marker("multihost") is not None) for item in items]
    if not all(mine):
        config.hook.pytest_deselected(items=[item for item, keep in zip(items, mine) if not keep])
        items[:] = [item for item, keep in zip(items, mine) if keep]


@pytest.fixture(autouse=True)
def no_leftover_processes(tmp_path):
    """Fails the test that leaves a process behind which was started from its temporary directory."""
    yield
    leftovers = processes_mentioning(str(tmp_path))
    assert not leftovers, f"processes left running: {leftovers}"


@pytest.fixture(scope="module")
def shared_servers(tmp_path_factory):
    """2 ps and 2 workers on loopback, started once per module by the launcher; yields the cluster.json path."""
    directory = tmp_path_factory.mktemp("cluster")
    path = write_cluster(directory, cluster_document(evaluator=False, logs_dir=str(directory / "logs")))
    supervisor = Supervisor(cluster_config.load(path), print)
    supervisor.start_servers()
    try:
        yield path
    finally:
        supervisor.stop_everything()
        assert processes_mentioning(str(directory)) == []


@pytest.fixture(scope="module")
def three_hosts():
    """Three hosts in network namespaces, each with sshd and a private workdir, shared by a module's tests."""
    with netns.create_hosts(3) as hosts:
        yield hosts
