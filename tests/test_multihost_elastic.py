"""A worker host gone for good: left out of the chief's cluster after launcher.worker_lost_after_s, added back when
it answers again, and never waited for by a chief that starts while it is gone.

The chief runs on the launcher's address; ps:0 and worker:0 on host 0, worker:1 alone on host 1.
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

import netns
from clusterkit import free_ports
from launcher import process
from test_multihost_cuts import Run, detached_run, reached_over_ssh

pytestmark = [pytest.mark.multihost, pytest.mark.cluster]
WORKER_HOST = 1
LOST_AFTER_S = 12  # under the launcher's 20 s stall grace (WORKER_LOSS_GRACE_S): the drop, not a hold, comes first


def chief_lines(run: Run, pattern: str, count: int, timeout_s: float) -> None:
    """Waits until the chief's log holds `count` more lines matching `pattern` than when called."""
    path = run.logs / "chief-0.log"
    before = len(re.findall(pattern, path.read_text(errors="replace")))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(re.findall(pattern, path.read_text(errors="replace"))) >= before + count:
            return
        time.sleep(0.5)
    raise AssertionError(f"fewer than {count} new {pattern!r} lines in the chief's log:\n{run.new_log()}")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("elastic")
    with netns.create_hosts(2) as hosts:
        h, ports = hosts.addresses, iter(free_ports(4))
        logs = directory / "logs"
        document = {
            "cluster": {"chief": [f"{hosts.launcher_address}:{next(ports)}"],
                        "worker": [f"{h[0]}:{next(ports)}", f"{h[1]}:{next(ports)}"], "ps": [f"{h[0]}:{next(ports)}"]},
            **reached_over_ssh(hosts, logs, worker_lost_after_s=LOST_AFTER_S),
            "training": {"output_dir": str(directory / "output"), "epochs": 10000, "steps_per_epoch": 40,
                         "steps_per_execution": 1, "lr_decay_epochs": [], "progress_every_s": 2,
                         "checkpoint_every_s": 5},
        }
        with detached_run(hosts, directory, document) as running:
            yield running


def test_a_worker_host_gone_for_good_is_dropped_then_added_back(run):
    run.offset = len(run.log())
    run.hosts.cut(WORKER_HOST)
    try:
        run.wait_for(rf"worker:1 lost for {LOST_AFTER_S} s \(launcher.worker_lost_after_s\): stopping chief:0", 90)
        run.wait_for(r"chief:0 trains with worker:0\n", 60)
        chief_lines(run, r"train \| epoch", 2, 180)  # training goes on without the host
        assert "training with worker:0 (launcher: the others are lost)" in (run.logs / "chief-0.log").read_text()
        assert re.search(r"worker:1 +\S+ +\S+ +lost", run.status()), run.status()
        assert "training with worker:0" in run.status()
    finally:
        run.hosts.restore(WORKER_HOST)
    run.wait_for(r"worker:1 running again: stopping chief:0", 90)
    assert "worker:1 started afresh to join" in run.new_log()  # no connection it kept through the cut holds a step
    run.wait_for(r"chief:0 trains with worker:0, worker:1", 60)
    run.wait_for(r"added worker:1 back: training again \d+ s after the return", 180)
    print(run.new_log())


def test_a_chief_that_restarts_while_a_worker_host_is_gone_does_not_wait_for_it(run):
    chief_lines(run, r"train \| epoch", 2, 120)
    run.offset = len(run.log())
    run.hosts.cut(WORKER_HOST)
    try:
        run.wait_for(r"lost .*worker:1; training goes on with worker:0", 30)
        record = process.PidRecord.read(run.logs / "chief-0.pid")
        os.killpg(record.pid, signal.SIGKILL)  # long before worker_lost_after_s: the chief starts without worker:1
        run.wait_for(r"chief:0 trains with worker:0\n", 60)
        chief_lines(run, r"train \| epoch", 2, 180)
    finally:
        run.hosts.restore(WORKER_HOST)
    run.wait_for(r"added worker:1 back: training again", 240)
    print(run.new_log())
