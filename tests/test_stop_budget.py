"""A stop's budget (pure logic): its deadline from SIGTERM and the launcher's grace, each step given what is left, a
step that cannot fit skipped and one still running at the deadline abandoned, each with one line, then the exit."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from common.preemption import StopRequest
from common.stop_budget import SLOW_STEP_FOR_TESTS, StopBudget, exit_margin_s


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _log(name: str):
    log = logging.getLogger(f"test-stop-budget-{name}")
    log.handlers[:], log.propagate = [Lines()], False
    log.setLevel(logging.INFO)
    return log, log.handlers[0].lines


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_deadline_keeps_a_margin_for_the_exit_and_each_wait_takes_at_most_its_share():
    assert [exit_margin_s(g) for g in (60, 20, 15, 5, 1)] == [10.0, 4.0, 3.0, 2.0, 2.0]
    clock = Clock(110.0)
    log, _ = _log("share")
    budget = StopBudget(arrived_at=100.0, grace_s=20.0, log=log, clock=clock, end=lambda: None)
    assert budget.deadline == 116.0 and budget.left() == 6.0 and budget.elapsed() == 10.0
    assert budget.share(20.0, 0.4) == pytest.approx(2.4) and budget.share(1.0) == 1.0
    clock.now = 120.0
    assert budget.left() == 0.0 and budget.share(20.0) == 0.0


def test_a_step_that_cannot_fit_is_skipped_with_one_line_and_the_stop_ends():
    clock, ended = Clock(100.0), []
    log, lines = _log("skip")
    budget = StopBudget(arrived_at=100.0, grace_s=20.0, log=log, clock=clock, end=lambda: ended.append(True))
    assert budget.begin("waiting for the running pieces", "trained again") and budget.current == \
        "waiting for the running pieces"
    clock.now = 108.0  # 8 s left; the last checkpoint took 12 s
    assert not budget.begin("the stop's checkpoint", "the next start resumes from ckpt-0-40", expected_s=12.0)
    assert ended == [True] and budget.ended == "the stop's checkpoint"
    (line,) = lines
    assert line.startswith("stop: the stop's checkpoint skipped 8.0 s after SIGTERM: 8.0 s left of "
                           "launcher.stop_grace_s (20 s, less 4 s for the exit), and it took 12.0 s last time; "
                           "the next start resumes from ckpt-0-40; exiting (code 4)"), line
    clock.now = 117.0
    assert not budget.begin("the last serving delta", "a version first") and len(ended) == 2  # nothing is left


def test_a_step_running_at_the_deadline_is_abandoned_by_the_watch_with_one_line(monkeypatch):
    """The step is made slow the way the real-server test does it (SLOW_STEP_FOR_TESTS)."""
    log, lines = _log("watch")
    ended = threading.Event()
    monkeypatch.setenv(SLOW_STEP_FOR_TESTS, "the stop's checkpoint=4")
    # deadline 3 s: a stall of this test before `begin` (CI's machines are slow) still leaves the step time to begin
    budget = StopBudget(arrived_at=time.monotonic(), grace_s=5.0, log=log, end=ended.set).watch()
    assert budget.begin("the stop's checkpoint", "the next start resumes from ckpt-0-40")  # returns after 4 s
    assert ended.wait(15.0) and budget.ended == "the stop's checkpoint"
    (line,) = lines
    assert line.startswith("stop: the stop's checkpoint not done ") and "(launcher.stop_grace_s 5 s, less 2 s for " \
        "the exit): abandoned, nothing of it made visible; the next start resumes from ckpt-0-40; exiting (code 4)" \
        in line, line


def test_a_stop_done_in_time_ends_the_watch_without_a_word():
    log, lines = _log("over")
    ended = []
    budget = StopBudget(arrived_at=time.monotonic(), grace_s=600.0, log=log, end=lambda: ended.append(True)).watch()
    assert budget.begin("the last serving delta", "a version first")
    budget.over()
    watch = next(t for t in threading.enumerate() if t.name == "stop-deadline")
    watch.join(5.0)
    assert not watch.is_alive() and ended == [] and lines == []


def test_sigterm_during_training_starts_the_budget_and_without_a_grace_nothing_is_held():
    log, lines = _log("request")
    free = StopRequest(log)
    assert free.step("anything", "nothing") and free.wait_s(20.0, 0.4) == 20.0
    held = StopRequest(log, grace_s=600.0)
    held.training = True
    held._on_sigterm(15, None)
    try:
        # the monotonic clock's seconds since boot: a sum of two floats, exact to a rounding (16091.225286011 + 590)
        assert held.budget is not None and held.budget.deadline - held.requested_at == pytest.approx(590.0)
        assert held.wait_s(20.0, 0.4) == 20.0 and held.step("the stop's checkpoint", "resumes")
        assert lines == ["asked to stop (SIGTERM): writing a checkpoint at the next step (the stop ends within 590 s: "
                         "launcher.stop_grace_s less 10 s for the exit)"]
    finally:
        held.budget.over()
