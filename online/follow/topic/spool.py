"""A followed topic's records on the chief's disk (output_dir/stream): one file per offset range of a partition,
written whole under a hidden name and flushed, then recorded, then renamed into place, so the follow loop trains
each as it trains a followed folder's file, once. Beside them, two small records: how far each partition was read
and the messages skipped or lost before there (`.positions.json`, naming the file it was written for: a chief
killed before that file took its name puts it in place at its next start, so record and files never disagree), and
which Kafka cluster and topic the files came from (`.source.json`). Pure Python."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import time
from pathlib import Path

from cluster.run_files import write_json_atomically
from common import durable
from online.follow.identity import head_of
from online.follow.landing import Landed

POSITIONS, SOURCE = ".positions.json", ".source.json"
_NAME = re.compile(r"p(\d{5})-(\d{20})-(\d{20})(\.tfrecord)?")


@dataclasses.dataclass(frozen=True)
class Segment:
    """Records of `partition` read from offset `first` up to (not including) `end`, `count` of them (offsets a
    transaction marker or compaction left empty hold none), the oldest produced at `oldest` (seconds)."""

    partition: int
    first: int
    end: int
    count: int = 0
    oldest: float = 0.0

    def name(self, tfrecord: bool) -> str:
        return f"p{self.partition:05d}-{self.first:020d}-{self.end:020d}" + ".tfrecord" * tfrecord


def parse_name(name: str) -> Segment | None:
    found = _NAME.fullmatch(name)
    return found and Segment(int(found[1]), int(found[2]), int(found[3]))


class Spool:
    """The folder `root` of one topic's files; `tfrecord`: records are serialized tf.train.Examples (a TFRecord file
    each, written by `write_records`), else lines."""

    def __init__(self, root: Path, *, tfrecord: bool, write_records=None):
        self.root, self.tfrecord, self.write_records = root, tfrecord, write_records
        root.mkdir(parents=True, exist_ok=True)
        self._publish_recorded()
        for left in root.glob(".p*.partial"):  # a chief killed while writing a file: read again from the topic
            left.unlink(missing_ok=True)

    def _publish_recorded(self) -> None:
        """The file the record was written for, put in place if a chief was killed before it took its name (it
        was whole on disk before the record was written)."""
        name = _read(self.root / POSITIONS).get("file")
        hidden = self.root / f".{name}.partial"
        if name and hidden.exists() and not (self.root / name).exists():
            durable.rename(hidden, self.root / name)

    def segments(self) -> list[tuple[str, Segment]]:
        """The files there now, by partition and offset."""
        found = [(entry.name, parse_name(entry.name)) for entry in os.scandir(self.root)]
        return sorted(((name, segment) for name, segment in found if segment), key=lambda item: item[1].first)

    def positions(self) -> dict[int, int]:
        """Where each partition is read up to: the record, or a file's end past it (a chief of an earlier version,
        which wrote the record after the file took its name, killed between the two)."""
        recorded = {int(p): int(offset) for p, offset in _read(self.root / POSITIONS).get("next", {}).items()}
        for _, segment in self.segments():
            recorded[segment.partition] = max(recorded.get(segment.partition, 0), segment.end)
        return recorded

    def counts(self) -> dict[str, int]:
        """Messages before the recorded positions that no file holds, as the record counts them: skipped as
        `malformed`, or `lost` to the topic's retention."""
        return {name: int(count) for name, count in _read(self.root / POSITIONS).get("counts", {}).items()}

    def write(self, segment: Segment, records: list[bytes], positions: dict[int, int],
              counts: dict[str, int]) -> Path:
        """The segment's file, whole and flushed under a hidden name, its modification time its oldest record's
        (what a resume takes as its landing time); then the record of the partitions' `positions` and `counts`,
        naming it; then the file under its name. A failure before the record names it leaves nothing (the range is
        cut again); after, the hidden file stays, whole, for the next try or the next start."""
        path = self.root / segment.name(self.tfrecord)
        hidden = self.root / f".{path.name}.partial"
        if not hidden.exists():  # else left whole by a try whose record named it and whose rename failed
            self._write_whole(hidden, records, segment.oldest)
        try:
            write_json_atomically(self.root / POSITIONS, {"next": {str(p): o for p, o in sorted(positions.items())},
                                                          "counts": counts, "file": path.name}, durable=True)
        except OSError:
            with contextlib.suppress(OSError):  # a record that cannot be read: the hidden file stays
                if _read(self.root / POSITIONS).get("file") != path.name:
                    hidden.unlink(missing_ok=True)
            raise
        durable.rename(hidden, path)
        return path

    def _write_whole(self, hidden: Path, records: list[bytes], oldest: float) -> None:
        """`records` in file `hidden`, flushed to disk (power loss too) before any record counts them; none left
        by a write that failed (a full disk)."""
        try:
            if self.tfrecord:
                self.write_records(str(hidden), records)
            else:
                with open(hidden, "wb") as handle:
                    handle.writelines(_line(record) for record in records)
            os.utime(hidden, (oldest, oldest))
            durable.sync_file(hidden)
        except BaseException:
            hidden.unlink(missing_ok=True)
            raise

    def landed(self, name: str, segment: Segment) -> Landed:
        """File `name` of `segment` as the follow loop takes a landed file: landed when its oldest record was made."""
        stat = (self.root / name).stat()
        return Landed(name, stat.st_size, stat.st_mtime, segment.oldest or stat.st_mtime, stat.st_dev, stat.st_ino,
                      head_of(self.root / name))

    def source(self) -> dict:
        return _read(self.root / SOURCE)

    def record_source(self, source: dict) -> None:
        write_json_atomically(self.root / SOURCE, source, durable=True)

    def remove(self, names: set[str]) -> list[str]:
        """Removes the files named (trained into a settled checkpoint); returns those removed."""
        removed = []
        for name, _ in self.segments():
            if name in names:
                (self.root / name).unlink(missing_ok=True)
                removed.append(name)
        return removed


def _line(record: bytes) -> bytes:
    """A record as one line: a producer's own line ending is not doubled."""
    return record if record.endswith(b"\n") else record + b"\n"


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}


class HeldRange:
    """Records of one partition read and not yet written: from offset `first`, through the newest read."""

    def __init__(self, first: int, since: float):
        self.first, self.end, self.since = first, first, since
        self.records: list[bytes] = []
        self.bytes, self.oldest = 0, 0.0
        self.malformed = self.lost = 0  # messages of the range skipped, or deleted before they were read

    def add(self, value: bytes, offset: int, timestamp) -> None:
        self.records.append(value)
        self.bytes += len(value) + 1
        self.end = offset + 1  # counted from the record itself: a marker's or a compacted offset is no record
        produced = timestamp[1] / 1000 if timestamp[0] else time.time()
        self.oldest = min(self.oldest, produced) if self.oldest else produced

