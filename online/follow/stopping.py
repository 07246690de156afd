"""A follow-mode chief's stop on SIGTERM, each step held to the stop's budget (common/stop_budget.py): the running
pieces, the checkpoint being written for a version, the settled checkpoint, safe_to_delete.json, the version being
written (or one of the stop's checkpoint), the last delta, then exit 4; a step that cannot finish is skipped, or
abandoned at the deadline, with one line, and the next start resumes from the newest settled checkpoint on disk."""

from __future__ import annotations

import time

from common.preemption import exit_preempted

STOP_WAIT_S = 20.0  # SIGTERM's longest wait for running pieces (or straggler_after_s, if less)
PIECES_SHARE = 0.4  # and at most this share of the stop's time: the checkpoint after them needs the rest
PUBLISH_SHARE = 0.7  # with deltas, the version being written leaves the rest to the last delta


class FollowStop:
    """The stop of `loop` (a FollowLoop) asked by SIGTERM; `run` ends the process."""

    def __init__(self, loop):
        self.loop, self.stop = loop, loop.p.stop
        self.saving, self.publishing, self.schedule = loop.saving, loop.publishing, loop.schedule

    def run(self) -> None:
        if not self.stop.step("waiting for the running pieces", "the pieces still running are trained again by "
                              "the next start"):
            return
        left = self._wait_for_pieces()
        said = "not needed (the last one holds every piece done)"
        if not self._join_for_version():
            return
        if self.loop._moved_since_save():
            if not self.stop.step("the stop's checkpoint", self._resumes_from(),
                                  expected_s=self.saving.save_seconds):
                return
            self.loop._save()
            said = f"{self.saving.name} written"
        if not self.stop.step(f"safe_to_delete.json of {self.saving.name}", "it names the files of the checkpoint "
                              "before; the next start writes it again from the checkpoint it resumes"):
            return
        self.publishing.record.flush()
        if not self._publish_before_stopping():
            return
        self.loop.p.run.log.info("stopped as asked: checkpoint %s %.1f s after SIGTERM; %d piece%s still running "
                                 "will be trained again by the next run; exiting", said,
                                 time.monotonic() - self.stop.requested_at, left, "s" * (left != 1))
        if self.stop.budget is not None:
            self.stop.budget.over()
        exit_preempted()

    def _wait_for_pieces(self) -> int:
        """The running pieces get what is left of STOP_WAIT_S (or straggler_after_s) since SIGTERM, and at most
        PIECES_SHARE of the stop's time; returns how many still run (left out of the checkpoint)."""
        most_s = min(STOP_WAIT_S, self.loop.p.run.options.straggler_after_s)
        most_s = max(0.0, most_s - (time.monotonic() - self.stop.requested_at))
        trainer = self.schedule.trainer
        self.schedule.record(trainer.all_finished(self.stop.wait_s(most_s, PIECES_SHARE)))
        return len(trainer.running)

    def _join_for_version(self) -> bool:
        """The checkpoint being written for a version, finished (a settled one cannot be written beside it) and
        dropped: not published, the next run publishes what is trained. False when the stop ended here."""
        if not self.saving.writing:
            return True
        if not self.stop.step("the checkpoint being written for the next serving version", "its version is not "
                              f"published; {self._resumes_from()}"):
            return False
        written = self.saving.written_for_version(wait=True)
        if written is not None:
            self.publishing.dropped(written.path)
        return True

    def _publish_before_stopping(self) -> bool:
        """The version being written, then one of the checkpoint just written if no version holds it (with deltas,
        the last delta does), each given what is left (one unfinished is stopped: the next run publishes that
        checkpoint first). False when the stop ended here."""
        publishing, deltas = self.publishing, self.publishing.deltas is not None
        then = f"the next start publishes {self.saving.name} first"
        if publishing.busy and not self.stop.step("the serving version being written", then):
            return False
        publishing.finish(self.stop.wait_s(float("inf"), PUBLISH_SHARE if deltas else 1.0))
        if not publishing.takes_deltas and publishing.behind(self.saving.saved_number):
            if not self.stop.step(f"a serving version of {self.saving.name}", then):
                return False
            if publishing.publish(self.saving.settled(), self.schedule.last_piece,
                                  against_checkpoint=self.schedule.trainer.moving):
                self.loop.p.run.log.info("publishing %s before stopping", self.saving.name)
                publishing.finish(self.stop.wait_s(float("inf")))
        if deltas and not self.stop.step("the last serving delta", then):
            return False
        publishing.write_last_delta()
        return True

    def _resumes_from(self) -> str:
        if not self.saving.saved_number:
            return "the next start begins the run again (no checkpoint was written yet)"
        return (f"the next start resumes from {self.saving.name} and trains again the pieces done since (nothing of "
                "them is in its model)")
