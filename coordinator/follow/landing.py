"""Files landing in a data folder, seen by polling: which are data, when each is complete, in landing order.

Which files are data is data/folder.py's rule (the pattern, no hidden `.` or `_` part). A file is complete, and
lands, at the first look where its size and modification time are what the previous look saw and its format
says it is whole (data/whole_files.py, through the data's `missing`). Files that land at the same look are taken
in natural name order (day_2 before day_10). A file's landing time is when its last byte was written (its
modification time, which a rename keeps), no earlier than the look before the one that first saw it (a file
moved in keeps an older time). Pure Python: no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable

from data.folder import data_files, natural_key


@dataclasses.dataclass(frozen=True)
class Landed:
    """A complete data file: `name` is its path under the folder ('/'-separated)."""

    name: str
    size: int
    mtime: float
    landed: float


@dataclasses.dataclass
class Look:
    """What one look found: files that landed, files still incomplete (name -> why), taken files that changed."""

    landed: list[Landed]
    incomplete: dict[str, str]
    changed: list[str]


class Landing:
    """Polls `root` for files matching `pattern`; `missing(path)` says what a file lacks to be whole (None if
    nothing); `taken` names files already trained or queued (a resumed run's), which never land again."""

    def __init__(self, root: Path, pattern: str, missing: Callable[[Path], str | None], *,
                 taken: dict[str, tuple[int, float]] | None = None, excluded: Callable[[str], bool] | None = None):
        self.root, self.pattern, self.missing = root, pattern, missing
        self.excluded = excluded or (lambda name: False)
        self.taken: dict[str, tuple[int, float]] = dict(taken or {})
        self.seen: dict[str, tuple[int, float, float, float | None]] = {}  # size, mtime, first seen, look before
        self.previous_look: float | None = None
        self.reported_changes: set[str] = set()
        self.verdicts: dict[str, tuple[tuple[int, float], str | None]] = {}  # a paused file is read once, not per look

    def look(self, now: float | None = None) -> Look:
        now = time.time() if now is None else now
        found = self._candidates()
        landed, incomplete = [], {}
        for name in sorted(set(found) - set(self.taken), key=natural_key):
            size, mtime = found[name]
            before = self.seen.get(name)
            if before is None or before[:2] != (size, mtime):
                self.seen[name] = (size, mtime, *(before[2:] if before else (now, self.previous_look)))
                if before is not None:
                    incomplete[name] = "it is still growing (taken once its size stands still over one look)"
                continue
            why = self._missing(name, (size, mtime))
            if why:
                incomplete[name] = why
                continue
            landed.append(Landed(name, size, mtime, _landing_time(mtime, now, before[3])))
            self.taken[name] = (size, mtime)
            del self.seen[name]
        self.seen = {name: seen for name, seen in self.seen.items() if name in found}
        self.verdicts = {name: verdict for name, verdict in self.verdicts.items() if name in self.seen}
        self.previous_look = now
        return Look(landed, incomplete, self._changed(found))

    def _missing(self, name: str, stat: tuple[int, float]) -> str | None:
        if name not in self.verdicts or self.verdicts[name][0] != stat:
            self.verdicts[name] = (stat, self.missing(self.root / name))
        return self.verdicts[name][1]

    def _candidates(self) -> dict[str, tuple[int, float]]:
        return data_files(self.root, self.pattern, self.excluded)

    def _changed(self, found: dict[str, tuple[int, float]]) -> list[str]:
        """Taken files whose size or time changed since (each reported once): new data needs a new name."""
        changed = [name for name, stat in found.items()
                   if name in self.taken and stat != self.taken[name] and name not in self.reported_changes]
        self.reported_changes.update(changed)
        return changed


def _landing_time(mtime: float, now: float, look_before: float | None) -> float:
    """When a file landed: when its last byte was written (its modification time; a rename keeps it), but no
    earlier than the look before the one that first saw it (a file moved in from elsewhere keeps an older time),
    and no later than the look that took it."""
    return min(now, mtime if look_before is None else max(mtime, look_before))


def landing_for(data, taken: dict[str, tuple[int, float]] | None = None) -> Landing:
    """A watcher of followed data `data` (data/followed.py: its folder, pattern and whole-file rule) that skips
    `taken` files (a resumed run's)."""
    return Landing(data.root, data.pattern, data.missing, taken=taken, excluded=data.excluded)
