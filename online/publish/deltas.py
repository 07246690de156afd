"""Serving deltas: the rows of the live tables changed since a step, with every dense weight whole, written beside the
serving versions while training goes on (the format: delta_format.py).

A delta reads the step counter first (its `read_step`) and advances every ps's stamp clock to it, waits SETTLE_S (an
update whose stamp was being written meanwhile lands), then reads, table by table and shard by shard on each ps, the
rows stamped at or after its `from_step`, a chunk at most at a time (each table's kind reads them:
tables/changed_rows.py). The next delta starts from this one's `read_step`: a change landing after a row was read
carries a stamp at or after it, so deltas overlap rather than leave a gap. An update's clock read and its stamp are
two ops: a stamp landing later than SETTLE_S after its clock was read (a ps stalled between them) carries a step
before this one's `read_step`, so the follow loop has each delta read rows from the one before's `from_step`
(`rows_from`): a stamp up to one whole delta interval late is still carried, at the cost of rows sent twice. The
rows go into the delta's bundle as one key per field (delta_bundle.py): no process holds more than a chunk read and
a chunk kept. Nothing waits for the workers and nothing stops them.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import shutil
import threading
import time
from pathlib import Path

import tensorflow as tf

from common import durable
from tables.changed_rows import TrackedTable, step_clock
from online.publish import delta_format as names
from online.publish import delta_ranges
from online.publish.delta_bundle import write_bundle
from tables.row_stamps import advance
from tables.streaming.entries import variable_keys
from tables.streaming.rows import CHUNK_BYTES, chunk_rows

SETTLE_S = 0.5  # between reading the step and the first row: longer than an update takes to stamp what it changed
ADVANCES_KEPT = 10_000  # clock advances kept (one a beat while the step moves: hours of training, far past the age of
# a version's checkpoint, which is written just before it starts), about 1.3 MB


@dataclasses.dataclass
class _Table:
    name: str
    fields: list[str]
    readers: list  # per part: its PartReader
    row_bytes: int
    devices: list[str]  # per part: its ps


class DeltaSource:
    """What deltas read of a live model (a SparseDenseModel, its tables tracked: kinds.track_changes): its
    tables' changed rows and its dense weights, named as the exported model's `apply_delta` takes them."""

    def __init__(self, model, tracked: list[TrackedTable], *, rows_on_ps: bool = False):
        """`rows_on_ps`: each ps writes its own tables' rows of a delta (every ps reaches the serving folder)."""
        self.clock, self.rows_on_ps = step_clock(model), rows_on_ps
        keys = variable_keys(tf.train.Checkpoint(model=model))
        table_refs, self.tables = set(), []
        for table in tracked:
            table_refs |= table.row_variables()
            self.tables.append(_Table(names.short_name(table.key(keys)), table.fields(),
                                      [table.reader(part) for part in table.parts], table.row_bytes(),
                                      [part.device for part in table.parts]))
        self.dense: dict[str, list] = {}
        for weight in model.weights:
            for variable in getattr(weight, "variables", [weight]):
                key = keys.get(variable.ref())
                if key is not None and variable.ref() not in table_refs:  # no key: rows a table's state keeps
                    self.dense.setdefault(key, []).append(variable)
        names.unique_names([*self.dense, *(table.name for table in self.tables)])
        self.dense = {names.short_name(key): variables for key, variables in self.dense.items()}
        self.dense_bytes = sum(variable.shape.num_elements() * variable.dtype.size
                               for variables in self.dense.values() for variable in variables)

        self.clocks = list({part.clock.ref(): part.clock for table in tracked for part in table.parts}.values())
        self.advances = ClockAdvances()

    def step(self) -> int:
        return int(self.clock.numpy())

    def warm_up(self, directory: Path) -> None:
        """With `rows_on_ps`, runs once every op the ps run to write a delta (at set-up: see delta_ranges)."""
        if self.rows_on_ps:
            delta_ranges.warm_up(self.tables, directory)

    def changed_bytes(self, since: int, chunk_bytes: int = CHUNK_BYTES) -> int:
        """Bytes a delta of the rows stamped at or after `since` would carry: those rows, counted on their ps (no row
        is read), and every dense weight."""
        rows = sum(table.row_bytes * sum(part.count(since, chunk_rows(table.row_bytes, chunk_bytes)))
                   for table in self.tables for part in table.readers)
        return rows + self.dense_bytes

    def advance(self) -> int:
        """Advances every stamp clock to the step counter as read now; returns that step."""
        step = self.step()
        for clock in self.clocks:
            advance(clock, step)
        self.advances.record(step, self.step())
        return step

    def watermark_before(self, step: int) -> int:
        return self.advances.watermark_before(step)


class ClockAdvances:
    """When the stamp clocks were advanced, once a beat: the newest ADVANCES_KEPT (step they were advanced to,
    step the counter read once they were); past it the oldest go, and a step older than every kept one gets 0."""

    def __init__(self, kept: int = ADVANCES_KEPT):
        self._advanced: collections.deque[tuple[int, int]] = collections.deque(maxlen=kept)
        self._lock = threading.Lock()

    def record(self, clocks: int, after: int) -> None:
        """Notes an advance; one the same as the newest (an idle beat) is not kept again: idle hours push out none."""
        with self._lock:
            if not self._advanced or self._advanced[-1] != (clocks, after):
                self._advanced.append((clocks, after))

    def watermark_before(self, step: int) -> int:
        """A step every change landing after the counter read `step` is stamped at or after: the newest step the
        clocks were advanced to before it (known by the counter read once they were: below `step`); 0 if none is
        kept (a step older than every kept advance: a delta from it reads every stamped row, never misses one)."""
        with self._lock:
            return max((clocks for clocks, after in self._advanced if after < step), default=0)

    def __len__(self) -> int:
        return len(self._advanced)


@dataclasses.dataclass(frozen=True)
class Written:
    """A delta on disk: where, what it covers, its rows per table, bytes and seconds."""

    path: Path
    version: int
    sequence: int
    from_step: int
    read_step: int
    rows: dict
    bytes: int
    seconds: float


def write_delta(source: DeltaSource, files: "DeltaFiles", *, version: int, sequence: int, from_step: int,
                rows_from: int | None = None, chunk_bytes: int = CHUNK_BYTES, extra: dict | None = None,
                settle_s: float = SETTLE_S) -> Written:
    """Writes delta `sequence` of version `version`, which follows the one that read at `from_step`: rows stamped at
    or after `rows_from` (default `from_step`; earlier, it carries rows of stamps that landed late), the dense
    weights, and a manifest holding `extra` too; whole under its name, or nothing visible if this fails."""
    rows_from = from_step if rows_from is None else rows_from
    started = time.monotonic()
    writing = files.writing(version, sequence)
    shutil.rmtree(writing, ignore_errors=True)
    writing.mkdir(parents=True)
    try:
        read_step = source.advance()
        time.sleep(settle_s)
        rows = write_bundle(source, writing, rows_from, chunk_bytes, version, keep_from=from_step)
        size = sum(path.stat().st_size for path in writing.iterdir())
        manifest = {"format": names.FORMAT, "version": version, "sequence": sequence, "from_step": from_step,
                    "rows_from_step": rows_from, "read_step": read_step, "written": time.time(), "rows": rows,
                    "bytes": size,
                    "seconds": round(time.monotonic() - started, 3), **(extra or {})}
        (writing / names.MANIFEST).write_text(json.dumps(manifest, indent=1))
        final = files.publish(version, sequence)
    except BaseException:
        shutil.rmtree(writing, ignore_errors=True)
        raise
    return Written(final, version, sequence, from_step, read_step, rows, size, manifest["seconds"])


class DeltaFiles:
    """The deltas under `<serving>/deltas`; leftovers of a write that died midway are removed on opening."""

    def __init__(self, serving: Path):
        self.directory = serving / names.DIRECTORY
        self.directory.mkdir(parents=True, exist_ok=True)
        for leftover in self.directory.glob(names.WRITING_PREFIX + "*"):
            shutil.rmtree(leftover, ignore_errors=True)

    def listed(self) -> list[tuple[int, int]]:
        """(version, sequence) of every delta, in order."""
        found = (names.parse_delta_name(path.name) for path in self.directory.iterdir())
        return sorted(item for item in found if item is not None)

    def of(self, version: int) -> list[int]:
        return [sequence for number, sequence in self.listed() if number == version]

    def version_folder(self, version: int) -> Path:
        """The serving version the deltas of `version` apply to."""
        return self.directory.parent / str(version)

    def writing(self, version: int, sequence: int) -> Path:
        return self.directory / (names.WRITING_PREFIX + names.delta_name(version, sequence))

    def publish(self, version: int, sequence: int) -> Path:
        """Renames the written delta into place, its files and folder flushed to disk first (a host crash must not
        leave a delta of empty files for a follower to apply); returns its path."""
        final = self.directory / names.delta_name(version, sequence)
        durable.publish(self.writing(version, sequence), final)
        return final

    def drop_before(self, version: int) -> int:
        """Removes the deltas of versions older than `version` (a follower moves to the newer one); how many."""
        old = [item for item in self.listed() if item[0] < version]
        for item in old:
            shutil.rmtree(self.directory / names.delta_name(*item), ignore_errors=True)
        return len(old)

    def drop(self, version: int, sequences: list[int]) -> int:
        for sequence in sequences:
            shutil.rmtree(self.directory / names.delta_name(version, sequence), ignore_errors=True)
        return len(sequences)
