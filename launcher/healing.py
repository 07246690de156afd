"""The healing policy: what to do when a task ends or training stops advancing, apart from the loop that watches.

The supervisor observes and carries out; this module only decides, from the strategy and the launcher settings.
"""

from __future__ import annotations

import dataclasses
import enum
import time

from cluster.config import LauncherSettings
from cluster.strategies import Strategy
from common.errors import DISK_FULL_EXIT_CODE, PREEMPTED_EXIT_CODE, USER_ERROR_EXIT_CODE
from launcher.records import TaskRecord
from launcher.repeated_failures import RepeatedFailures


HEALTHY_RUN_S = 60.0  # a task that ran this long since its start was not failing over and over: a new row begins
LONGEST_BACKOFF_S = 60.0  # the doubling stops here (or at restart_backoff_s, if larger)


class Action(enum.Enum):
    FINISHED = "finished"  # a trainer or the evaluator did its job
    RESTART = "restart"  # start it again after `delay_s`
    DROP = "drop"  # a sidecar out of restarts: training goes on without it
    HOLD = "hold"  # the lead waits for the end of its place (a Slurm time limit): not started again there
    FAIL_RUN = "fail the run"


@dataclasses.dataclass(frozen=True)
class Decision:
    action: Action
    message: str
    delay_s: float = 0.0
    hold_chief: bool = False  # a ps died: its variables are gone, the chief waits until every ps is back
    restart_group: bool = False  # collectives cannot lose a member: the other trainers restart too
    restart_ps: bool = False  # a chief started again on live ps would hold its tables there twice: they restart too
    counts: bool = True  # counted against max_restarts (a stop asked from outside, with a checkpoint, is not)
    run_exit_code: int = 1  # FAIL_RUN: what `sh run.sh` exits with (2 for a user error, 5 for a full disk)


class HealingPolicy:
    """Restarts with doubling backoff up to `max_restarts` in a row; user errors (exit 2) and a full disk (exit 5)
    never, nor a lead that failed twice in a row with the same error before training; a ps holds the chief.

    Backoff and `max_restarts` judge the restarts in a row: a task that ran HEALTHY_RUN_S since its last start
    begins a new row, so a long run whose tasks are lost now and then (preemption, a kill) restarts each at once
    and is never stopped for the sum of its losses; a task that fails over and over still is. The backoff stops
    doubling at LONGEST_BACKOFF_S: a lead killed again and again while it starts (the soak found it waiting 128 s)
    waits a minute at most.
    """

    def __init__(self, settings: LauncherSettings, strategy: Strategy):
        self.settings, self.strategy = settings, strategy
        self.repeats = RepeatedFailures()
        self.rows: dict[str, int] = {}  # task -> counted restarts since it last ran HEALTHY_RUN_S

    def restarts_in_a_row(self, record: TaskRecord) -> int:
        if time.monotonic() - record.started_at >= HEALTHY_RUN_S:
            self.rows[record.name] = 0
        return self.rows.get(record.name, 0)

    def finishes(self, record: TaskRecord) -> bool:
        """Whether this task ends by itself when its work is done (trainers and the evaluator)."""
        return record.task.job in (self.strategy.trainer_job, "evaluator")

    def on_exit(self, record: TaskRecord, code: int | None, ending: str | None = None) -> Decision:
        """What to do about a task that ended; `ending`: why its place's time is nearly up (a Slurm time limit)."""
        name, job = record.name, record.task.job
        if self.finishes(record) and code == 0:
            return Decision(Action.FINISHED, f"{name} finished")
        what = f"{name} exited with code {code}" if code is not None else f"{name} died"
        if code == USER_ERROR_EXIT_CODE:
            return Decision(Action.FAIL_RUN, f"{what} (a user error; not restarted): {record.last_line}",
                            run_exit_code=USER_ERROR_EXIT_CODE)
        if code == DISK_FULL_EXIT_CODE:
            return Decision(Action.FAIL_RUN, f"{what} (its disk is full; not restarted, it would meet the same wall): "
                                             f"{record.last_line}", run_exit_code=DISK_FULL_EXIT_CODE)
        if job == self.strategy.trainer_job and record.task.index == 0 and self.repeats.repeated(record, code):
            return Decision(Action.FAIL_RUN, f"{what} again before training a step, with the same error as at its "
                                             f"last start (a restart cannot help): {record.last_line}")
        if code == PREEMPTED_EXIT_CODE and job == self.strategy.trainer_job and ending:
            return Decision(Action.HOLD, f"{name} was stopped from outside the launcher (SIGTERM) and wrote a "
                                         f"checkpoint; {ending}: it is not started again in this job, and the "
                                         "next `sh run.sh` resumes there", counts=False)
        if code == PREEMPTED_EXIT_CODE and job == self.strategy.trainer_job:
            return Decision(Action.RESTART, f"{name} was stopped from outside the launcher (SIGTERM) and wrote a "
                                            "checkpoint; starting it again, it resumes there", counts=False,
                            restart_ps=self._leaves_variables_on_ps(job))
        row = self.restarts_in_a_row(record)
        if row >= self.settings.max_restarts:
            used_up = f"{what} after {row} restart{'s' if row != 1 else ''} in a row (launcher.max_restarts)"
            if job == "worker" and "worker" in self.strategy.server_jobs:
                return Decision(Action.DROP, f"{used_up}; training goes on with the other workers, and the chief "
                                             "leaves it out after launcher.worker_lost_after_s")
            if job == "evaluator":
                return Decision(Action.DROP, f"{used_up}; training goes on without it; last log line: "
                                             f"{record.last_line}")
            return Decision(Action.FAIL_RUN, f"{used_up}; last log line: {record.last_line}")
        first_s = self.settings.restart_backoff_s
        delay_s = min(first_s * 2 ** row, max(first_s, LONGEST_BACKOFF_S))
        self.rows[name] = row + 1
        return Decision(Action.RESTART, f"{what}; restarting in {delay_s:.0f} s (restart {row + 1} of "
                                        f"{self.settings.max_restarts} in a row)", delay_s=delay_s,
                        hold_chief=job == "ps",
                        restart_group=job == self.strategy.trainer_job and self.strategy.restarts_as_group,
                        restart_ps=self._leaves_variables_on_ps(job))

    def _leaves_variables_on_ps(self, job: str) -> bool:
        """Whether `job`'s end leaves its variables on ps that stay up: TensorFlow frees a dead client's only when
        its context expires (600 s), so a new chief on those ps would make every table a second time beside them."""
        return job == self.strategy.trainer_job and "ps" in self.strategy.server_jobs

    def stall(self, lead: TaskRecord, servers_up: bool, now: float) -> str | None:
        """Why the lead counts as stalled, or None: its optimizer step unchanged for stall_timeout_s while every
        server is up. Judged only while it trains (not while it starts or exports); a slow but advancing run is
        never touched. Called every pass while the lead runs, so it also notes whether this life reached training."""
        self.repeats.observe(lead)
        frozen_s = now - lead.step_changed_at
        if lead.step is None or not servers_up or frozen_s <= self.settings.stall_timeout_s:
            return None
        return (f"{lead.name}'s optimizer step has not advanced from {lead.step} for {frozen_s:.0f} s "
                "(launcher.stall_timeout_s) while every ps and worker is up")
