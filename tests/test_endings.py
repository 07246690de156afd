"""How `sh run.sh` ends (pure logic): each ending's exit code, as docs/running.md's table gives it."""

from __future__ import annotations

import re
import signal
import time
import types

import pytest

from clusterkit import ROOT, cluster_document, write_cluster
from cluster import config as cluster_config
from launcher import run as launcher_run
from launcher.healing import Action, HealingPolicy
from launcher.preflight import PreflightFailed
from launcher.records import RunFailed, TaskRecord, TaskState
from launcher.report import Report


@pytest.fixture
def config(tmp_path):
    return cluster_config.load(write_cluster(tmp_path, cluster_document(logs_dir=str(tmp_path / "logs"))))


class FakeSupervisor:
    """What run_job asks of a Supervisor, with `run` doing what the test says (return a code or raise)."""

    ending: object = 0

    def __init__(self, config, say):
        self.records = {t.name: TaskRecord(t) for t in config.tasks()}
        self.lead, self.hosts = self.records[config.lead.name], {}
        self.membership = types.SimpleNamespace(enabled=False)

    def start_cluster(self):
        pass

    def run(self, on_tick):
        if isinstance(self.ending, BaseException):
            raise self.ending
        return self.ending

    def stop_everything(self):
        return []

    def fetch_logs(self, wait=False):
        pass

    def close(self):
        pass


def ended(monkeypatch, config, ending, *, trained: bool = True, preflight: list[str] | None = None) -> int:
    """run_job's exit code when the supervised run ends with `ending` (a code, or an exception it raises)."""
    supervisor = type("Ending", (FakeSupervisor,), {"ending": ending})

    def check(*args, **kwargs):
        if preflight:
            raise PreflightFailed(preflight)

    monkeypatch.setattr(signal, "signal", lambda *args: None)  # run_job's SIGTERM handler stays out of pytest
    monkeypatch.setattr(launcher_run, "Supervisor", supervisor)
    monkeypatch.setattr(launcher_run, "check_cluster", check)
    monkeypatch.setattr(launcher_run, "final_report", lambda *args: Report([], trained))
    monkeypatch.setattr(launcher_run, "write_status", lambda *args, **kwargs: None)
    return launcher_run.run_job(config)


def test_each_ending_of_a_run_has_the_code_the_docs_give(monkeypatch, config):
    assert ended(monkeypatch, config, 0) == 0  # complete
    assert ended(monkeypatch, config, 0, trained=False) == 1  # the lead exited 0 without a complete summary
    assert ended(monkeypatch, config, RunFailed("chief:0 exited with code 2 (a user error)", code=2)) == 2
    assert ended(monkeypatch, config, RunFailed("chief:0 exited with code 5 (its disk is full)", code=5)) == 5
    assert ended(monkeypatch, config, RunFailed("ps:0 died after 3 restarts in a row")) == 1
    assert ended(monkeypatch, config, KeyboardInterrupt("SIGTERM")) == 143  # sh kill.sh, a scheduler's stop
    assert ended(monkeypatch, config, KeyboardInterrupt()) == 130  # Ctrl-C
    assert ended(monkeypatch, config, 0, preflight=["port 1 is already in use"]) == 2  # nothing started


def test_the_policy_gives_each_failure_its_runs_exit_code(config):
    policy = HealingPolicy(config.launcher, config.strategy)
    chief, ps = TaskRecord(config.task("chief", 0)), TaskRecord(config.task("ps", 0))
    for record in (chief, ps):
        record.started_at, record.last_line = time.monotonic(), "error: ..."
    user_error, disk_full = policy.on_exit(chief, 2), policy.on_exit(chief, 5)
    assert (user_error.action, user_error.run_exit_code) == (Action.FAIL_RUN, 2)
    assert (disk_full.action, disk_full.run_exit_code) == (Action.FAIL_RUN, 5)
    assert "its disk is full; not restarted" in disk_full.message
    for _ in range(config.launcher.max_restarts):  # a ps lost over and over: restarts used up
        assert policy.on_exit(ps, None).action == Action.RESTART
    given_up = policy.on_exit(ps, None)
    assert (given_up.action, given_up.run_exit_code) == (Action.FAIL_RUN, 1)
    evaluator = TaskRecord(config.task("evaluator", 0))
    evaluator.state = TaskState.RUNNING
    assert policy.on_exit(evaluator, 5).run_exit_code == 5  # it writes best_model/ beside the chief's output


def test_the_docs_table_of_endings_lists_every_code():
    text = (ROOT / "docs" / "running.md").read_text()
    table = text.split("## How `sh run.sh` ends", 1)[1].split("\n## ", 1)[0]
    codes = {int(code) for code in re.findall(r"^\| (\d+) \|", table, flags=re.MULTILINE)}
    assert codes == {0, 1, 2, 5, 130, 143}, table
