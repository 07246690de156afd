"""What a follow-mode chief says: each file as it lands, starts and is done; a progress line at least every
`progress_every_s` while it trains (files done, steps/s, examples/s, how far behind the newest data it is, the
training metrics since the last checkpoint); a line while it waits for data; the heartbeat the launcher and the
evaluator judge it by (phase `wait` while caught up, which is not a stall); the same scalars in TensorBoard.
"""

from __future__ import annotations

import datetime
import os
import time

import tensorflow as tf

from cluster.run_files import Phase, RunFiles, TrainingProgress, write_progress
from online.follow.intake import size_text
from online.follow.file_entry import FileEntry
from common.bounded import OnceKeys
from online.follow.ledger import Ledger

HEARTBEAT_EVERY_S = 2.0
WAITING_LINE_EVERY_S = 600.0


def duration(seconds: float) -> str:
    return str(datetime.timedelta(seconds=round(max(seconds, 0.0))))


PROBLEM_WORDS = (("skipped_records", "records skipped"), ("quarantined_files", "files quarantined"),
                 ("bad_files", "files bad"), ("lost_files", "files lost"), ("unfinished_files", "taken unfinished"),
                 ("changed_files", "changed after taken"), ("io_errors", "I/O errors"))


def problems_text(problems: dict) -> str:
    """`not trained: 30 records skipped, 1 files quarantined` from a ledger's problems, or '' when none."""
    said = [f"{problems[key]} {words}" for key, words in PROBLEM_WORDS if problems.get(key)]
    return "not trained: " + ", ".join(said) if said else ""


def follow_line(*, done: int, files: int, step: int, steps_per_s: float, examples_per_s: float, waiting: int,
                behind_s: float, pieces: dict[int, int], metrics: dict, problems: dict | None = None) -> str:
    """`follow | files 3/5 done | step 412 | 23.1 steps/s | 1478 ex/s | behind 2 files, 0:00:42 | pieces w0:9 w1:4 |
    loss 0.6931` (`pieces`: how many each worker has trained in this run; a slow worker takes fewer), with
    `| not trained: 12 records skipped, ...` before the pieces when some data was not trained (`problems`)."""
    behind = f"behind {waiting} file{'s' * (waiting != 1)}, {duration(behind_s)}" if waiting else "caught up"
    by_worker = " ".join(f"w{worker}:{count}" for worker, count in sorted(pieces.items())) or "none yet"
    shown = "".join(f" | {name} {value:.4f}" for name, value in metrics.items())
    untrained = problems_text(problems or {})
    return (f"follow | files {done}/{files} done | step {step} | {steps_per_s:.1f} steps/s | "
            f"{examples_per_s:.0f} ex/s | {behind}{' | ' + untrained if untrained else ''} | pieces {by_worker}{shown}")


class FollowReport:
    """Lines, heartbeat and TensorBoard scalars of one follow-mode run (the chief's)."""

    def __init__(self, log, files: RunFiles, model, *, every_s: float, device: str, folder: str, poll_s: float,
                 tables=None):
        """`tables`: a dynamic tables' TableReport, whose rows end each progress line."""
        self.log, self.files, self.model, self.every_s, self.device = log, files, model, every_s, device
        self.folder, self.poll_s, self.tables = folder, poll_s, tables
        with tf.device(device):
            self.writer = tf.summary.create_file_writer(str(files.train_events))
        self.last_beat = self.last_line = self.last_waiting_line = 0.0
        self.line_step, self.line_examples, self.said = self._step(), 0, OnceKeys()
        self._scalars({"files_done": 0})  # now: a first eager op mid-run would wait for every task, a frozen one too
        self.kept = None  # what the chief keeps, as text (online/follow/kept.py), ending each progress line
        self.source = None  # how far reading a topic is behind, as text (online/follow/topic/lag.py)

    def _scalars(self, scalars: dict, step: int | None = None) -> None:
        """TensorBoard scalars at `step` (the model's now by default), each as a Python float: every line runs the
        same eager ops as the first, written at set-up."""
        with tf.device(self.device), self.writer.as_default(step=self.line_step if step is None else step):
            for name, value in scalars.items():
                tf.summary.scalar(name, float(value))
        self.writer.flush()

    def _step(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def landed(self, entry: FileEntry, now: float) -> None:
        self.log.info("%s: landed (%s, %d piece%s), %s ago", entry.name, size_text(entry.size), entry.piece_count,
                      "s" * (entry.piece_count != 1), duration(now - entry.landed))

    def started(self, entry: FileEntry, now: float) -> None:
        self.log.info("%s: started, %s after it landed", entry.name, duration(now - entry.landed))

    def done(self, entry: FileEntry) -> None:
        self.log.info("%s: done, %d examples in %d piece%s, %s after it started", entry.name, entry.examples,
                      entry.piece_count, "s" * (entry.piece_count != 1), duration(entry.finished - entry.started))

    def reset_metrics(self) -> None:
        """Starts the training metrics afresh (called where no piece runs: a reset would race their updates)."""
        for metric in self.model.metrics:
            metric.reset_state()

    def once(self, key: str, message: str, *args) -> None:
        """A line said once per key (a file still being written, a file changed after it was trained); the newest
        keys are kept (common/bounded.py), so a line about a file long gone may be said once more."""
        if self.said.first(key):
            self.log.info(message, *args)

    def beat(self, phase: Phase, *, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last_beat >= HEARTBEAT_EVERY_S:
            self.last_beat = now
            write_progress(self.files, TrainingProgress(pid=os.getpid(), phase=phase, epoch=0, step=self._step(),
                                                        time=time.time()))

    def progress(self, ledger: Ledger, examples: int, pieces: dict[int, int], metrics: dict, *,
                 training: bool) -> None:
        """A progress line when one is due while training (`examples`: trained in all so far; `metrics`: as the
        newest finished piece left them); while caught up, a waiting line when training stops and then every
        WAITING_LINE_EVERY_S."""
        now = time.monotonic()
        if (training and now - self.last_line >= self.every_s) or (not training and self.line_examples != examples):
            self._line(ledger, examples, pieces, metrics, now)  # due, or the last of a stretch that just ended
        elif not training and now - self.last_waiting_line >= WAITING_LINE_EVERY_S:
            self.last_waiting_line = now
            newest = ledger.files and f", the newest landed {duration(time.time() - ledger.files[-1].landed)} ago"
            untrained = problems_text(ledger.problems())
            self.log.info("waiting for data: %d files done%s; looking at %s every %g s%s", ledger.done_count(),
                          newest or "", self.folder, self.poll_s, untrained and f"; {untrained}")

    def _line(self, ledger: Ledger, examples: int, pieces: dict[int, int], metrics: dict, now: float) -> None:
        step, elapsed = self._step(), max(now - self.last_line, 1e-9)
        steps_per_s, examples_per_s = (step - self.line_step) / elapsed, (examples - self.line_examples) / elapsed
        waiting, behind_s = ledger.behind(time.time())
        problems = ledger.problems()
        line = follow_line(done=ledger.done_count(), files=ledger.file_count(), step=step, steps_per_s=steps_per_s,
                           examples_per_s=examples_per_s, waiting=waiting, behind_s=behind_s, pieces=pieces,
                           metrics=metrics, problems=problems)
        kept = f" | {self.kept()}" if self.kept else ""
        source = f" | {self.source()}" if self.source and self.source() else ""
        self.log.info("%s", line + source + kept + (f" | {self.tables.line()}" if self.tables else ""))
        self._scalars({**metrics, "steps_per_sec": steps_per_s, "examples_per_sec": examples_per_s,
                       "files_done": ledger.done_count(), "behind_s": behind_s,
                       "records_skipped": problems["skipped_records"]}, step)
        self.last_line = self.last_waiting_line = now
        self.line_step, self.line_examples = step, examples
