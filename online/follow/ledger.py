"""Where a follow-mode run's data stands, the one record of which files are taken: each file landed (in landing order)
with its identity (identity.py) and names, its pieces and which are done, its examples and skipped records, what
became of it (trained, quarantined, lost) and when it first reached a serving version; saved in every checkpoint
(JSON). The watcher reads the names it holds (`known`), so a resumed run never opens a file it took. A piece,
named by (its file's `seq`, its index), is done once its closure returned, a file once all its pieces are (or
quarantined, lost); pieces running at a checkpoint are not done in it, so a resume trains them again. Pure Python.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import threading
from typing import Iterator

from online.follow.compaction import Compacted
from online.follow.file_entry import BAD, LOST, QUARANTINED, TRAINED, FileEntry
from online.follow.identity import Identity, Stat
from online.follow.landing import Landed
from data.pieces import Piece

CHECKPOINT_NAME = "data_ledger"  # the object holding the ledger's JSON in every follow-mode checkpoint
FORMAT = 2  # the JSON's version: 1 (a bare list of files) is read too
RECENT_FILES = 20  # finished files the bad-data bound judges (online/follow/quarantine.py)
COMPACT_AFTER_S = 600.0  # a file done with is folded into counts this long after it left the folder


class Ledger:
    """The files of a follow-mode run in landing order; `(seq, piece index)` names a piece. The names it holds
    (`known`) may be read from another thread (the folder's watcher); everything else is the loop's."""

    def __init__(self, files: list[FileEntry] | None = None, compacted: Compacted | None = None,
                 recent: list[str] | None = None, io_errors: int = 0):
        self.files = files or []
        for number, entry in enumerate(self.files):
            entry.seq = number if entry.seq < 0 else entry.seq
        self.by_seq = {entry.seq: entry for entry in self.files}
        self.next_seq = max(self.by_seq, default=-1) + 1
        self.compacted = compacted or Compacted()
        self.recent = collections.deque(recent or (), maxlen=RECENT_FILES)
        self.io_errors = io_errors
        self._lock = threading.Lock()
        self._names = {name: entry.seq for entry in self.files if entry.gone is None
                       for name in (entry.name, *entry.aliases)}

    # ----- the names it holds ------------------------------------------------------------------------------------
    def known(self) -> dict[str, Identity]:
        """Every name the ledger holds, with its file's identity (a copy: the watcher's thread reads it)."""
        with self._lock:
            return {name: self.by_seq[seq].identity for name, seq in self._names.items()}

    def entry_named(self, name: str) -> FileEntry | None:
        seq = self._names.get(name)
        return None if seq is None else self.by_seq[seq]

    def add(self, landed: Landed, pieces: list[Piece], now: float) -> FileEntry:
        entry = FileEntry(landed.name, landed.size, landed.mtime, landed.landed, [[p.begin, p.end] for p in pieces],
                          piece_count=len(pieces), seq=self.next_seq, dev=landed.dev, ino=landed.ino,
                          head=landed.head, unfinished=landed.unfinished)
        self.next_seq += 1
        self.files.append(entry)
        self.by_seq[entry.seq] = entry
        with self._lock:
            self._names[entry.name] = entry.seq
        if landed.unreadable:
            self.end(entry, QUARANTINED, landed.unreadable, now)
        elif not pieces:  # an empty file: nothing to train, done at once
            entry.started = entry.finished = now
        return entry

    def add_gone(self, entry: FileEntry, now: float) -> FileEntry:
        """A file this ledger never held, already gone from the folder (a resume learns of it from what was served)."""
        entry.seq, entry.gone = self.next_seq, now
        self.next_seq += 1
        self.files.append(entry)
        self.by_seq[entry.seq] = entry
        return entry

    def renamed(self, new: str, old: str) -> FileEntry | None:
        """A held file found under the name `new` (its name `old` left, or a hard link): it follows the file."""
        entry = self.entry_named(old)
        if entry is None or new in self._names:
            return None
        with self._lock:
            self._names[new] = entry.seq
        entry.aliases.append(new)
        return entry

    def gone(self, name: str, now: float) -> FileEntry | None:
        """The name left the folder; returns its file if that was its last name."""
        entry = self.entry_named(name)
        if entry is None:
            return None
        with self._lock:
            del self._names[name]
        names = [n for n in (entry.name, *entry.aliases) if n in self._names]
        if names:  # it is still there under another name, which becomes its name
            entry.name, entry.aliases = names[0], names[1:]
            return None
        entry.gone = now
        return entry

    def adopt(self, name: str, stat: Stat) -> bool:
        """A file found as taken but through another device or inode (a resumed older ledger's file, another
        node's mount, a copy that kept its times): its device and inode now are recorded; False when they were
        already (a look queued before an earlier one was taken)."""
        entry = self.entry_named(name)
        if entry is None or (entry.dev, entry.ino) == (stat.dev, stat.ino):
            return False
        with self._lock:
            entry.dev, entry.ino = stat.dev, stat.ino
        return True

    # ----- its pieces --------------------------------------------------------------------------------------------
    def pending(self, busy: set[tuple[int, int]], newest_first: bool = False) -> Iterator[tuple[int, int]]:
        """Pieces neither done nor in `busy`, oldest file first (or newest first), in file order: made as they are
        taken, so a beat that hands out a few pieces never lists a backlog of thousands."""
        files = reversed(self.files) if newest_first else self.files
        return ((entry.seq, p) for entry in files if not entry.complete
                for p in range(len(entry.pieces)) if p not in entry.done and (entry.seq, p) not in busy)

    def piece(self, key: tuple[int, int]) -> Piece | None:
        """The piece `key` names, or None once its file is done with (a piece still running then is no longer
        handed out)."""
        entry = self.by_seq.get(key[0])
        if entry is None or key[1] >= len(entry.pieces):
            return None
        begin, end = entry.pieces[key[1]]
        return Piece(entry.name, begin, end)

    def start(self, key: tuple[int, int], now: float) -> bool:
        """Notes a piece handed out; True when it is its file's first."""
        entry = self.by_seq[key[0]]
        first = entry.started is None
        entry.started = now if first else entry.started
        return first

    def finish(self, key: tuple[int, int], examples: int, now: float, steps: int = 0, skipped: int = 0,
               bad_fraction: float = 1.0) -> bool:
        """Marks a piece done with the examples and steps it trained and the malformed records it skipped; True
        when that completes its file (BAD if more than `bad_fraction` of its records were malformed)."""
        entry = self.by_seq.get(key[0])
        if entry is None or key[1] in entry.done or key[1] >= len(entry.pieces):
            return False
        if entry.complete:  # a LOST file's piece that ran when the file went: what it trained counts
            self._trained_after_it_went(entry, key[1], examples, steps, skipped, now)
            return False
        entry.done.append(key[1])
        entry.examples += examples
        entry.steps += steps
        entry.skipped += skipped
        if len(entry.done) == len(entry.pieces):
            read = entry.examples + entry.skipped
            bad = bool(read) and entry.skipped > bad_fraction * read
            self.end(entry, BAD if bad else TRAINED, f"{entry.skipped} of {read} records malformed" if bad else "",
                     now)
            return True
        return False

    def end(self, entry: FileEntry, outcome: str, note: str, now: float) -> None:
        """The file is done with: TRAINED or BAD (all its pieces done), QUARANTINED or LOST (its pieces not done
        are counted, not trained; a LOST file keeps its pieces for those still running)."""
        entry.lost_bytes = entry.untrained_bytes() if outcome in (QUARANTINED, LOST) else 0
        entry.outcome, entry.note, entry.finished = outcome, note, now
        entry.started = entry.started or now
        if outcome != LOST:
            entry.pieces, entry.done = [], []
            self.recent.append(outcome)

    def _trained_after_it_went(self, entry: FileEntry, index: int, examples: int, steps: int, skipped: int,
                               now: float) -> None:
        """A piece of a LOST file finished: its examples are trained; once every piece is, the file is TRAINED."""
        entry.done.append(index)
        entry.examples, entry.steps, entry.skipped = entry.examples + examples, entry.steps + steps, \
            entry.skipped + skipped
        entry.lost_bytes = entry.untrained_bytes()
        if len(entry.done) == len(entry.pieces):
            entry.outcome, entry.note, entry.finished = TRAINED, "its last pieces finished after it went", now
            entry.pieces, entry.done = [], []

    # ----- where it stands ---------------------------------------------------------------------------------------
    def serve(self, version: int, now: float, names: set[str]) -> list[FileEntry]:
        """Records that serving version `version` holds the files `names` (those done in its checkpoint);
        returns the files it is the first version to hold."""
        fresh = [entry for entry in self.files if entry.name in names and entry.trained and
                 entry.served_version is None]
        for entry in fresh:
            entry.served_version, entry.served = version, now
        return fresh

    def served_from(self, trained_through: dict) -> None:
        """A resumed run learns which files an already written serving version holds (its trained_through.json)."""
        versions = {item["name"]: item for item in trained_through.get("files_done", [])}
        for entry in self.files:
            if entry.served_version is None and entry.name in versions:
                entry.served_version = trained_through["version"]
                entry.served = trained_through["written"]

    def behind(self, now: float) -> tuple[int, float]:
        """Files landed and not yet done, and how long ago the oldest of them landed (0 when caught up)."""
        waiting = [entry for entry in self.files if not entry.complete]
        return len(waiting), (now - min(entry.landed for entry in waiting)) if waiting else 0.0

    def done_count(self) -> int:
        """Files done with (trained, quarantined or lost), compacted ones included."""
        return sum(entry.complete for entry in self.files) + self.compacted.files

    def file_count(self) -> int:
        return len(self.files) + self.compacted.files

    def problems(self) -> dict:
        """What was not trained, in counts: records skipped, files quarantined, bad or lost (and their bytes not
        trained), files taken unfinished or changed after they were taken, I/O errors met by the watcher."""
        counted = self.compacted.problems()
        for entry in self.files:
            counted["skipped_records"] += entry.skipped
            counted["quarantined_files"] += entry.outcome == QUARANTINED
            counted["bad_files"] += entry.outcome == BAD
            counted["lost_files"] += entry.outcome == LOST
            counted["untrained_bytes"] += entry.lost_bytes
            counted["unfinished_files"] += bool(entry.unfinished)
            counted["changed_files"] += bool(entry.changed)
        counted["io_errors"] = self.io_errors
        return counted

    def compact(self, now: float) -> int:
        """Folds files done with, gone from the folder for COMPACT_AFTER_S (and served, if trained) into counts;
        returns how many. Every file still in the folder keeps its entry, so its identity is known."""
        kept = []
        for entry in self.files:
            if entry.complete and entry.gone is not None and entry.gone <= now - COMPACT_AFTER_S and \
                    (not entry.trained or entry.served_version is not None):
                self.compacted.add(entry)
                del self.by_seq[entry.seq]
            else:
                kept.append(entry)
        folded = len(self.files) - len(kept)
        self.files = kept
        return folded

    def to_json(self) -> str:
        with self._lock:
            return json.dumps({"format": FORMAT, "files": [_without_defaults(entry) for entry in self.files],
                               "compacted": self.compacted.to_dict(), "recent": list(self.recent),
                               "io_errors": self.io_errors, "next_seq": self.next_seq}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Ledger":
        """A checkpoint's ledger: this format, or the bare list of files of a run started before identities."""
        if not text:
            return cls()
        raw = json.loads(text)
        if isinstance(raw, list):
            return cls([FileEntry(**entry) for entry in raw])
        ledger = cls([FileEntry(**entry) for entry in raw["files"]], Compacted.from_dict(raw.get("compacted", {})),
                     raw.get("recent"), raw.get("io_errors", 0))
        ledger.next_seq = max(ledger.next_seq, raw.get("next_seq", 0))
        return ledger


_DEFAULTS = {field.name: field.default if field.default_factory is dataclasses.MISSING else field.default_factory()
             for field in dataclasses.fields(FileEntry) if field.default is not dataclasses.MISSING
             or field.default_factory is not dataclasses.MISSING}


def _without_defaults(entry: FileEntry) -> dict:
    """An entry's fields, those at their default left out (a done file's pieces, outcome, notes...)."""
    return {name: value for name, value in dataclasses.asdict(entry).items()
            if name not in _DEFAULTS or value != _DEFAULTS[name]}
