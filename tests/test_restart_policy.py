"""What a restart cannot help, and what the summary says after restarts (pure logic): a lead failing twice in a
row with the same error before training stops the run; a restarted lead keeps the run's time and metrics."""

from __future__ import annotations

import time
import types

import pytest

from clusterkit import cluster_document, write_cluster
from cluster import config as cluster_config
from cluster.run_files import RunFiles, RunSummary, TrainingProgress, read_progress, write_progress
from launcher.backends.base import RunOutputs
from launcher.healing import HEALTHY_RUN_S, Action, HealingPolicy
from launcher.records import TaskRecord
from launcher.report import summary_lines

RESTORE_ERROR = "AssertionError: Found 1 Python objects that were not bound to checkpointed values"


@pytest.fixture
def policy(tmp_path):
    config = cluster_config.load(write_cluster(tmp_path, cluster_document(evaluator=False)))
    return config, HealingPolicy(config.launcher, config.strategy)  # launcher defaults: max_restarts 3


def life(policy: HealingPolicy, record: TaskRecord, code: int | None, line: str, *, step: int | None = None,
         ran_s: float = 1.0, waiting: bool = False, waiting_at_exit: bool = False):
    """One life of a task: started `ran_s` ago, observed running (with `step` reported or not, `waiting` for data
    or not), exited with `code` (its last heartbeat saying it waited, with `waiting_at_exit`)."""
    record.started_at, record.step, record.last_line = time.monotonic() - ran_s, step, line
    record.waiting = waiting
    policy.stall(record, servers_up=True, now=time.monotonic())  # what the supervisor calls each pass
    record.step, record.waiting = None, waiting_at_exit  # the row of an ended task: no step
    decision = policy.on_exit(record, code)
    record.restarts += int(decision.action == Action.RESTART)
    return decision


def test_the_same_error_twice_before_training_stops_the_run_with_that_error(policy):
    config, policy = policy
    chief = TaskRecord(config.task("chief", 0))
    assert life(policy, chief, 1, RESTORE_ERROR).action == Action.RESTART
    stopped = life(policy, chief, 1, RESTORE_ERROR)
    assert stopped.action == Action.FAIL_RUN and stopped.message == (
        "chief:0 exited with code 1 again before training a step, with the same error as at its last start "
        f"(a restart cannot help): {RESTORE_ERROR}")


@pytest.mark.parametrize("between", [
    (1, "ValueError: something else", None),  # another error: a restart may help
    (None, "resuming after epoch 2", None),  # killed by a signal: not a failure of its own
    (3, "error: ps:0 at localhost:1 did not answer within 60 s", None),  # exit 3: a task it needs may come back
    (1, RESTORE_ERROR, 120),  # it reported step 120 first: it trained, so this start was not futile
], ids=["other-error", "killed", "unavailable", "trained"])
def test_a_failure_that_may_pass_breaks_the_row(policy, between):
    config, policy = policy
    chief = TaskRecord(config.task("chief", 0))
    assert life(policy, chief, 1, RESTORE_ERROR).action == Action.RESTART
    code, line, step = between
    assert life(policy, chief, code, line, step=step).action == Action.RESTART
    assert life(policy, chief, 1, RESTORE_ERROR).action == Action.RESTART  # the row starts again here
    assert life(policy, chief, 1, RESTORE_ERROR).action == Action.FAIL_RUN


@pytest.mark.parametrize("seen", ["while-running", "in-last-heartbeat"])
def test_a_caught_up_follow_chief_is_never_judged_failed_before_training(policy, seen):
    """Waiting for data is past the start (restored, looking at the folder): the same error twice there, e.g. a
    transient error of the watcher, is restarted, not judged one that a restart cannot help."""
    config, policy = policy
    chief = TaskRecord(config.task("chief", 0))
    waited = {"waiting": True} if seen == "while-running" else {"waiting_at_exit": True}
    error = "OSError: [Errno 116] Stale file handle: '/data/clicks'"
    assert [life(policy, chief, 1, error, **waited).action for _ in range(2)] == [Action.RESTART] * 2
    assert life(policy, chief, 1, error).action == Action.RESTART  # before training this time: the first such


def test_the_agent_reads_waiting_from_the_leads_own_last_heartbeat(tmp_path):
    from launcher import agent, process

    config = cluster_config.load(write_cluster(tmp_path, cluster_document(
        evaluator=False, logs_dir=str(tmp_path / "logs"), training={"output_dir": str(tmp_path / "output")})))
    (tmp_path / "logs").mkdir()
    files = RunFiles(tmp_path / "output")
    files.output.mkdir()
    lead = config.task("chief", 0)
    process.PidRecord(4_000_000, 1, ("python",)).write(agent.task_file(config, lead, "pid"))  # ended: no such pid
    for phase, pid, waiting in [("wait", 4_000_000, True), ("train", 4_000_000, False), ("wait", 17, False)]:
        write_progress(files, TrainingProgress(pid=pid, phase=phase, epoch=0, step=5, time=time.time()))
        row = agent.status(config, lead)
        assert (row.running, row.step, row.waiting) == (False, None, waiting)  # another pid's beat is not its own


def test_servers_and_exit_3_are_restarted_until_max_restarts(policy):
    config, policy = policy
    worker, chief = TaskRecord(config.task("worker", 0)), TaskRecord(config.task("chief", 0))
    assert [life(policy, worker, 1, "Bad thing").action for _ in range(3)] == [Action.RESTART] * 3
    assert [life(policy, chief, 3, "ps:0 did not answer").action for _ in range(4)] == [Action.RESTART] * 3 + [
        Action.FAIL_RUN]


def test_a_task_that_ran_a_minute_starts_a_new_row_of_restarts_and_backoff(policy):
    config, policy = policy
    worker = TaskRecord(config.task("worker", 1))
    delays = [life(policy, worker, None, "", ran_s=5).delay_s for _ in range(3)]  # failing over and over
    assert delays == [2.0, 4.0, 8.0]
    decision = life(policy, worker, None, "", ran_s=5)
    assert decision.action == Action.DROP and "after 3 restarts in a row (launcher.max_restarts)" in decision.message
    worker = TaskRecord(config.task("worker", 0))
    lost = [life(policy, worker, None, "", ran_s=HEALTHY_RUN_S + 1) for _ in range(10)]  # killed now and then
    assert {(d.action, d.delay_s) for d in lost} == {(Action.RESTART, 2.0)} and worker.restarts == 10


def test_the_backoff_stops_doubling_at_a_minute(tmp_path):
    document = cluster_document(evaluator=False)
    document["launcher"]["max_restarts"] = 10
    config = cluster_config.load(write_cluster(tmp_path, document))
    policy, chief = HealingPolicy(config.launcher, config.strategy), TaskRecord(config.task("chief", 0))
    delays = [life(policy, chief, None, "").delay_s for _ in range(8)]  # killed again and again while it starts
    assert delays == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]


def outputs(tmp_path, age_s: float) -> RunOutputs:
    summary = RunSummary(status="complete", epochs=8, optimizer_steps=3366, steps_per_epoch=420,
                         train_seconds=412.0, final_metrics={"loss": 0.41}, model={"h5": "m.h5"})
    return RunOutputs(output=str(tmp_path), summary=summary, summary_age_s=age_s, best=None, best_age_s=None)


def test_a_crashed_lead_is_never_reported_as_having_had_nothing_to_train(tmp_path):
    crashed = f"chief:0 failed (exit 1: {RESTORE_ERROR})"
    lines, trained = summary_lines(outputs(tmp_path, age_s=3600), "", wall_s=60, lead_failed=crashed)
    assert not trained and lines == [
        f"training did not finish: {crashed}; {tmp_path} holds an earlier run's summary, the complete run of 8 "
        "epochs (summary written 3600 s ago, before this run)"]
    lines, trained = summary_lines(outputs(tmp_path, age_s=3600), "", wall_s=60)  # the lead found it complete
    assert trained and lines[0].startswith(f"trained nothing: {tmp_path} already held the complete run of 8")


def test_a_restarted_lead_carries_the_runs_training_time_and_last_epoch_metrics(tmp_path):
    from coordinator.progress import ProgressReport

    files = RunFiles(tmp_path)
    write_progress(files, TrainingProgress(pid=1, phase="train", epoch=8, step=3366, time=0.0, train_s=412.0,
                                           epoch_metrics={"loss": 0.41, "auc": 0.77}))
    report = ProgressReport(types.SimpleNamespace(info=lambda *_: None), tmp_path / "events", files, epochs=8,
                            steps_per_epoch=420, global_batch=64, every_s=30.0, device=None)
    report.set_model(types.SimpleNamespace(optimizer=types.SimpleNamespace(
        iterations=types.SimpleNamespace(numpy=lambda: 3360))))
    report.on_epoch_begin(7)  # a resume within the last epoch: the earlier leads' time goes on counting
    beat = read_progress(files)
    assert beat.step == 3360 and beat.epoch_metrics == {"loss": 0.41, "auc": 0.77}
    assert 412.0 <= beat.train_s < 412.0 + 60


def test_a_chief_that_lost_a_ps_exits_3_in_one_line_so_its_failures_never_count_as_futile():
    import tensorflow as tf

    from common.lost_tasks import exit_when_a_task_is_lost

    said = []
    log = types.SimpleNamespace(error=lambda text, *args: said.append(text % args))
    with pytest.raises(SystemExit) as exited:
        with exit_when_a_task_is_lost(log, "a ps this chief needs was lost", "the run resumes"):
            raise tf.errors.UnavailableError(None, None, "Failed copying input tensor to /job:ps/replica:0/task:1\n"
                                                         "recvmsg:Connection reset by peer")
    assert exited.value.code == 3 and said == ["a ps this chief needs was lost (UnavailableError: Failed copying "
                                               "input tensor to /job:ps/replica:0/task:1); exiting so the run resumes"]


def test_a_summary_is_stamped_with_its_launcher_run_and_a_followed_run_is_complete_only_for_it(tmp_path,
                                                                                               monkeypatch):
    import json

    from cluster.run_files import RUN_VARIABLE, training_finished, write_summary

    files = RunFiles(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"status": "complete", "epochs": 10}))  # today's: no run
    assert training_finished(files, 10) and not training_finished(files, 10, run="run-b")
    monkeypatch.setenv(RUN_VARIABLE, "run-a")
    write_summary(files, RunSummary(status="complete", epochs=10))
    assert json.loads((tmp_path / "summary.json").read_text())["run"] == "run-a"
    assert training_finished(files, 10, run="run-a") and not training_finished(files, 10, run="run-b")
    monkeypatch.delenv(RUN_VARIABLE)
    write_summary(files, RunSummary(status="complete", epochs=10, run="run-a"))  # a chief started by hand
    assert json.loads((tmp_path / "summary.json").read_text())["run"] is None
