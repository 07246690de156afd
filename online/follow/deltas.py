"""The follow loop's deltas: every `serving_delta_every_s` (on a clock: at its first tick after something trained), the
rows changed since the last one are written beside the serving versions (online/publish/deltas.py) on a
thread of the chief's, so neither hand-out nor the workers wait for it.

Deltas form a chain on the newest published version: its first delta starts from the step its checkpoint was
read at, each next one from the step the one before was read at. When a newer version is published the chain
moves to it and the older version's deltas go (a follower moves to the newer version). Once a newer version's
checkpoint is taken the older chain writes no more deltas (`hold`): the new version then holds every step they
served, so no reader goes back in time when it switches; its first delta comes as soon as it is out. On SIGTERM
and at the end of a run a last delta is written (`write_last`). A restarted chief starts no chain before its first
version is published (the old chain's rows are the killed run's). A chain is at most `chain_cap` deltas long (as many
as CHAIN_VERSIONS version intervals give): while versions keep failing, each delta carrying every dense weight, the
deltas then pause, said in one line, until a version is published and a new chain starts. A delta that would carry
more than half its version's bytes is replaced by a version (churn.py).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time

import tensorflow as tf

from tables.changed_rows import step_clock
from tables.kinds import track_changes
from online.follow import kill_points
from online.follow.churn import ChurnSwitch, Oversized
from online.follow.ledger import Ledger
from online.follow.report import duration
from online.publish.deltas import DeltaFiles, DeltaSource, Written, write_delta
from tables.streaming.entries import variable_keys
from tables.streaming.rows import chunk_bytes_of

CHAIN_VERSIONS = 4  # a chain holds at most the deltas of this many version intervals (three versions failed in a row)
CHAIN_FLOOR = 10  # and never fewer than this many deltas


def chain_cap(export_every_s: float, delta_every_s: float) -> int:
    """The most deltas a chain holds before deltas pause until a version is published."""
    return max(CHAIN_FLOOR, math.ceil(CHAIN_VERSIONS * export_every_s / max(delta_every_s, 1e-9)))


@dataclasses.dataclass
class Chain:
    """Deltas of `version`: the next is number `sequence`, from step `from_step`, carrying the rows stamped at or
    after `rows_from` (the delta before's own `from_step`: a stamp landing up to one whole interval late is still
    carried); what is served holds the training up to step `through` (the version's checkpoint's, or the last
    delta's)."""

    version: int
    sequence: int
    from_step: int
    through: int
    rows_from: int


class _Job:
    """One delta written on a thread: its result or error once done, and the files it serves."""

    def __init__(self, write, chain: Chain, serves: list[dict]):
        self.chain, self.serves = chain, serves
        self.result: Written | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._write, args=(write,), name="serving-delta", daemon=True)

    def _write(self, write) -> None:
        try:
            self.result = write()
        except Exception as error:  # noqa: BLE001 - said by the loop; the next delta covers the same rows again
            self.error = error


class FollowDeltas:
    """The deltas of a follow-mode run; `every_s` between them."""

    def __init__(self, *, source: DeltaSource, files: DeltaFiles, restore_moves_rows: bool, clock_key: str,
                 every_s: float, chunk_bytes: int, log, cap: int = 1 << 62, switch_mb: float = 0.0):
        """`source`: what deltas read; `files`: where they go; `restore_moves_rows`: a tracked table's restore lays
        its rows out anew; `clock_key`: the step counter's checkpoint key; `cap`: the most deltas of one chain
        (chain_cap); `switch_mb`: the size under which a delta is never replaced by a version (churn.py)."""
        self.source, self.files, self.clock_key = source, files, clock_key
        self.restore_moves_rows = restore_moves_rows
        self.every_s, self.chunk_bytes, self.log, self.cap = every_s, chunk_bytes, log, cap
        self.chain: Chain | None = None
        self.job: _Job | None = None
        self.origin = self.last_tick = time.monotonic()  # the deltas' clock ticks every `every_s` from `origin`
        self.wanted_at: float | None = None  # when a delta was first wanted since the last one
        self._checkpoint_steps: dict[str, int] = {}  # a version's checkpoint -> the step counter it holds
        self.held = False  # a version's checkpoint was taken: no delta of this chain until it is out or dropped
        self.paused_at: int | None = None  # the version whose chain reached `cap` (said once)
        self.churn = ChurnSwitch(switch_mb, log)

    @classmethod
    def create(cls, run, model, distribution, *, rows_on_ps: bool = False):
        """The run's deltas of `model` (its tables tracked from now on: call before training) into the run's
        serving folder, or None when it writes none; with `rows_on_ps` each ps writes its own tables' rows."""
        options = run.options
        if not options.serving_delta_every_s:
            return None
        tracked = track_changes(model, distribution)
        clock_key = variable_keys(tf.train.Checkpoint(model=model, optimizer=model.optimizer))[step_clock(model).ref()]
        source, files = DeltaSource(model, tracked, rows_on_ps=rows_on_ps), DeltaFiles(run.files.serving)
        source.warm_up(files.directory)
        return cls(source=source, files=files,
                   restore_moves_rows=any(table.restore_moves_rows for table in tracked), clock_key=clock_key,
                   every_s=options.serving_delta_every_s, chunk_bytes=chunk_bytes_of(options), log=run.log,
                   cap=chain_cap(options.serving_export_every_s, options.serving_delta_every_s),
                   switch_mb=options.serving_delta_switch_mb)

    def from_step(self, checkpoint: str) -> int:
        """The step the chain of a version written from `checkpoint` starts at: every change landing after the
        checkpoint read its first row carries a stamp at or after it (the counter as the checkpoint holds it was
        read before its rows; the stamp clocks were last advanced before that to this step)."""
        step = self._checkpoint_steps[checkpoint] = int(tf.train.load_variable(checkpoint, self.clock_key))
        return self.source.watermark_before(step)

    def based_on(self, version: int, checkpoint: str, from_step: int) -> None:
        """Version `version`, written from `checkpoint`, is published: the chain moves to it, from `from_step` (a
        delta of the older chain being written goes once done). Its first delta, when wanted, comes at once, off the
        clock: the files trained since the checkpoint (which a dropped delta would have served) wait for it."""
        self.chain = Chain(version, 1, from_step, self._checkpoint_steps.pop(checkpoint, from_step), from_step)
        self._checkpoint_steps.clear()  # a dropped version's: never published
        self.held, self.paused_at = False, None
        self.churn.based_on(self.files.version_folder(version))
        self.last_tick = self.wanted_at = float("-inf")
        stale = self.files.of(version)  # none but a killed run's, whose rows are not this chain's
        dropped = self.files.drop_before(version) + self.files.drop(version, stale)
        if dropped:
            self.log.info("serving | %d delta%s of earlier versions removed", dropped, "s" * (dropped != 1))

    @property
    def busy(self) -> bool:
        return self.job is not None

    @property
    def version_wanted(self) -> bool:
        """Whether a delta was too large for its version (churn.py): a version is due now."""
        return self.churn.version_wanted

    def hold(self, ledger: Ledger) -> None:
        """A version's checkpoint is about to be taken: the delta being written is finished and no other of this
        chain starts until that version is out (`based_on`) or dropped (`release`), so the version holds every step
        a delta served and a reader switching to it never goes back."""
        self.finish(ledger)
        self.held = True

    def release(self) -> None:
        """The version a hold waited for is not published: this chain goes on."""
        self.held = False
        self._checkpoint_steps.clear()  # that version's checkpoint step: no version of it comes
        self.churn.release()

    def _trained_since(self) -> bool:
        return self.chain is not None and self.source.step() > self.chain.through

    def _wanted(self, ledger: Ledger) -> bool:
        """Whether a delta has something to give: steps since the last one, or a file whose last steps it held but
        which finished after it began (without this, that file waited for the next file's steps)."""
        return self._trained_since() or (self.chain is not None and any(
            entry.trained and entry.served_version is None for entry in ledger.files))

    def poll(self, ledger: Ledger) -> None:
        """Records the delta being written once done; starts the next when due; else advances the stamp clocks (so
        the next version's chain starts from a step at most a beat before its checkpoint)."""
        if self.job is not None and not self.job.thread.is_alive():
            self._done(ledger)
            self.wanted_at = self.last_tick if self._wanted(ledger) else None  # steps while it was written
        if self.job is None:
            self.source.advance()
        if self.job is None and self.chain is not None and not self.held and not self.churn.version_wanted \
                and self._ticked(ledger, time.monotonic()) and not self._paused():
            self._start(ledger)

    def _paused(self) -> bool:
        """Whether this chain holds `cap` deltas: none more until a version is published (said once per chain)."""
        if self.chain.sequence <= self.cap:
            return False
        if self.paused_at != self.chain.version:
            self.paused_at = self.chain.version
            self.log.warning("serving | deltas paused: version %d's chain holds %d deltas (as many as %d version "
                             "intervals give) and no newer version was published; they go on, in a new chain, once "
                             "one is", self.chain.version, self.chain.sequence - 1, CHAIN_VERSIONS)
        return True

    def sizes(self) -> dict[str, int]:
        """What the deltas keep, measured: the stamp clocks' advances, the newest chain's deltas on disk."""
        return {"clock_advances": len(self.source.advances),
                "delta_chain": self.chain.sequence - 1 if self.chain is not None else 0}

    def _ticked(self, ledger: Ledger, now: float) -> bool:
        """Whether the deltas' clock ticked since a delta was first wanted (and since the last delta). On a clock, not
        `every_s` after whatever came first: a delta started by the first steps after a quiet spell would miss the
        file those steps train, finishing just after it began, and that file would wait a whole interval every
        time (files landing every 20 s, deltas every 10 s: each waited 10 s)."""
        if not self._wanted(ledger):
            self.wanted_at = None
            return False
        self.wanted_at = now if self.wanted_at is None else self.wanted_at
        tick = self._newest_tick(now)
        return tick >= self.wanted_at and tick > self.last_tick

    def _newest_tick(self, now: float) -> float:
        return self.origin + self.every_s * ((now - self.origin) // self.every_s)

    def _start(self, ledger: Ledger, *, any_size: bool = False) -> None:
        """Starts the next delta on a thread; unless `any_size`, one too large for its version is not written."""
        chain = dataclasses.replace(self.chain)
        serves = [{"name": e.name, "landed": e.landed, "seq": e.seq} for e in ledger.files
                  if e.complete and e.served_version is None]
        extra = {"trained_through": {"files_done": serves}}

        def write() -> Written | Oversized:
            if not any_size and self.churn.limit is not None:
                size = self.source.changed_bytes(chain.rows_from, self.chunk_bytes)
                if self.churn.too_large(size):
                    return Oversized(chain.version, chain.sequence, size, self.churn.limit)
            return write_delta(self.source, self.files, version=chain.version, sequence=chain.sequence,
                               from_step=chain.from_step, rows_from=chain.rows_from, chunk_bytes=self.chunk_bytes,
                               extra=extra)
        self.job = _Job(write, chain, serves)
        self.last_tick, self.wanted_at = self._newest_tick(time.monotonic()), None
        self.job.thread.start()

    def _done(self, ledger: Ledger) -> None:
        job, self.job = self.job, None
        if job.error is not None:
            self.log.error("serving delta %d.%d not written (the next one covers its rows): %s: %s",
                           job.chain.version, job.chain.sequence, type(job.error).__name__, job.error)
            return
        written = job.result
        if isinstance(written, Oversized):
            if written.version == self.chain.version:  # else the chain moved on meanwhile: no version is wanted
                self.churn.replace(written)
            return
        if self.chain.version != written.version:  # the chain moved on while it was written
            self.files.drop(written.version, [written.sequence])
            self.log.info("serving | delta %d.%d dropped: version %d is out", written.version, written.sequence,
                          self.chain.version)
            return
        kill_points.reached("delta_published")
        self.chain = Chain(written.version, written.sequence + 1, written.read_step, written.read_step,
                           written.from_step)
        served = ledger.serve(written.version, time.time(), {entry["name"] for entry in job.serves})
        rows = sum(written.rows.values())
        self.log.info("serving | delta %d.%d | steps %d to %d | %d row%s changed | %d file%s newly served | "
                      "freshness %s | %.2f MB in %.1f s", written.version, written.sequence, written.from_step,
                      written.read_step, rows, "s" * (rows != 1), len(served), "s" * (len(served) != 1),
                      duration(served[-1].freshness_s) if served else "-", written.bytes / 1e6, written.seconds)

    def finish(self, ledger: Ledger) -> None:
        """Waits for the delta being written, and records it."""
        if self.job is not None:
            self.job.thread.join()
            self._done(ledger)

    def write_last(self, ledger: Ledger) -> None:
        """The last delta of a run (SIGTERM, the end): written now, off the clock, if it has something to give
        (steps since the one before, or a trained file no delta served yet)."""
        self.finish(ledger)
        if self._wanted(ledger) and not self._paused():
            self._start(ledger, any_size=True)
            self.finish(ledger)
