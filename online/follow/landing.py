"""Files landing in a data folder, seen by polling: which are data, when each is taken, and what became of the
files the ledger holds. Pure Python: no TensorFlow.

Which files are data is data/folder.py's rule (the pattern, no hidden `.` or `_` part). Names the ledger holds
(`known`: name -> Identity, online/follow/identity.py) are listed, not opened: a known name whose listing gives
another inode is stat'ed and judged (a new file, or the same file reached through another device or inode); a
few known names per look (KNOWN_STATS_PER_LOOK, in turn) are also stat'ed, to find files changed in place,
replaced under a reused inode, or reached through another device. Every other name is stat'ed: one that is
a known file under a new name (a rename, a hard link) is followed, never taken again.

A new file is taken at the first look where its size and modification time stood still for `settle_s` (as the
looks saw it, or by its modification time, already that old, at two looks in a row: a file moved in is taken at
once) and its format then says whole (data/whole_files.py, through the data's `verdict`). A file whose format
says it is not whole (no newline at its end, a gzip stream with no end) waits until it stood still for
`unfinished_after_s` and is then taken as it is; one that cannot be read (a corrupt gzip, a bad record, not this
format) is taken to be quarantined, never read by a worker. Files taken at the same look come in natural name
order (day_2 before day_10): the ledger keeps landing order (which it hands out first is its choice). A file's
landing time is when its last byte was written (its modification time, which a rename keeps), no earlier than
the look before the one that first saw it (a file moved in keeps an older time). An OSError on one file (gone
between the listing and its stat, EIO, ESTALE) leaves it for the next look; one on the folder itself fails the
look (FolderWatch tries again).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from pathlib import Path
from typing import Callable, Mapping

from online.follow.identity import CHANGED, MOVED, NEW, SAME, Identity, Stat, head_of, judge, stat_of
from data.folder import listing, natural_key
from data.whole_files import UNFINISHED, UNREADABLE, Verdict

KNOWN_STATS_PER_LOOK = 1000  # known names stat'ed per look, in turn: a change in place is found within n/1000 looks
FIRST_SEEN = "seen for the first time"  # a file's first look cannot tell whether it is still being written


@dataclasses.dataclass(frozen=True)
class Landed:
    """A file taken: `name` is its path under the folder ('/'-separated); `unfinished` says why its format says
    it is not whole (taken as it is), `unreadable` why it cannot be read (quarantined, not trained)."""

    name: str
    size: int
    mtime: float
    landed: float
    dev: int | None = None
    ino: int | None = None
    head: str | None = None
    unfinished: str = ""
    unreadable: str = ""

    @property
    def identity(self) -> Identity:
        return Identity(self.size, self.mtime, self.dev, self.ino, self.head)


@dataclasses.dataclass
class Look:
    """What one look found. `waiting`: files not taken yet (name -> why); `grew`: names whose size or time changed
    since the last look (a writer at work); `renamed`: (new name, known name) of a known file found under a new
    name; `changed`: known files changed in place (name -> their Stat now); `gone`: known names no longer there
    (name -> why); `adopted`: a resumed old ledger's names with the Stat that matched them; `errors`: names (''
    for the folder) whose stat or check failed with an OSError (retried at the next look); `listed`, `stats`,
    `opened`: how much the look cost; `held`: names the ledger held; `moved`: known names whose file is reached
    through another device or inode now (name -> its Stat now)."""

    landed: list[Landed] = dataclasses.field(default_factory=list)
    waiting: dict[str, str] = dataclasses.field(default_factory=dict)
    grew: set[str] = dataclasses.field(default_factory=set)
    renamed: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    changed: dict[str, Stat] = dataclasses.field(default_factory=dict)
    gone: dict[str, str] = dataclasses.field(default_factory=dict)
    adopted: dict[str, Stat] = dataclasses.field(default_factory=dict)
    moved: dict[str, Stat] = dataclasses.field(default_factory=dict)
    errors: dict[str, str] = dataclasses.field(default_factory=dict)
    listed: int = 0
    stats: int = 0
    opened: int = 0
    held: int = 0


@dataclasses.dataclass(frozen=True)
class _Seen:
    stat: Stat
    since: float  # the first look that saw this version
    look_before: float | None  # the look before the one that first saw the file


class Landing:
    """Polls `root` for files matching `pattern`; `verdict(path)` says what a file's format makes of it (a
    Verdict); `known()` gives the ledger's names and their Identity (online/follow/ledger.py: the one record
    of what is taken)."""

    def __init__(self, root: Path, pattern: str, verdict: Callable[[Path], Verdict], *,
                 known: Callable[[], Mapping[str, Identity]] = dict, excluded: Callable[[str], bool] | None = None,
                 settle_s: float = 0.0, unfinished_after_s: float = 0.0):
        self.root, self.pattern, self.verdict, self.known = root, pattern, verdict, known
        self.excluded = excluded or (lambda name: False)
        self.settle_s, self.unfinished_after_s = settle_s, unfinished_after_s
        self.seen: dict[str, _Seen] = {}
        self.verdicts: dict[str, tuple[Stat, Verdict]] = {}  # a waiting file is checked once per version
        self.taken_not_known: set[str] = set()  # landed, not yet in the ledger (the loop takes looks later)
        self.reported_changes: set[tuple[str, tuple[int, float]]] = set()
        self.turn = 0  # where the known names' stats go on at the next look
        self.previous_look: float | None = None

    def look(self, now: float | None = None) -> Look:
        now = time.time() if now is None else now
        known = dict(self.known())
        listed = listing(self.root, self.pattern, self.excluded)
        self.taken_not_known = {name for name in self.taken_not_known if name in listed and name not in known}
        self.reported_changes = {change for change in self.reported_changes if change[0] in known}  # held files
        look = Look(listed=len(listed), held=len(known))
        fresh = self._known_names(known, listed, look)
        by_object = {(i.dev, i.ino, i.size, i.mtime): name for name, i in known.items() if i.ino is not None}
        for name in sorted(fresh, key=natural_key):
            self._consider(name, now, by_object, look)
        self.seen = {name: seen for name, seen in self.seen.items() if name in fresh}
        self.verdicts = {name: verdict for name, verdict in self.verdicts.items() if name in self.seen}
        self.previous_look = now
        return look

    def _known_names(self, known: Mapping[str, Identity], listed: dict[str, int], look: Look) -> list[str]:
        """Checks the known names (gone, replaced, changed in place) and returns the names to consider as new."""
        fresh = [name for name in listed if name not in known and name not in self.taken_not_known]
        names = list(known)
        self.turn = self.turn % len(names) if names else 0
        checked = set(itertools.islice(itertools.chain(names[self.turn:], names[:self.turn]), KNOWN_STATS_PER_LOOK))
        self.turn += KNOWN_STATS_PER_LOOK
        for name, taken in known.items():
            if name not in listed:
                look.gone[name] = "deleted (or renamed out of the pattern)"
            elif taken.ino is None or listed[name] != taken.ino or name in checked:
                self._check_known(name, taken, look, fresh)
        return fresh

    def _check_known(self, name: str, taken: Identity, look: Look, fresh: list[str]) -> None:
        path = self.root / name
        try:
            stat = stat_of(path)
            look.stats += 1
            said = judge(taken, stat, path)
            look.opened += said != SAME and taken.head is not None and \
                (taken.same_object(stat) or taken.version == stat.version)
        except FileNotFoundError:
            look.gone[name] = "deleted (or renamed out of the pattern)"
            return
        except OSError as error:
            look.errors[name] = str(error)
            return
        if said == MOVED:
            (look.adopted if taken.ino is None else look.moved)[name] = stat
        elif said == NEW:
            look.gone[name] = "replaced by a new file under its name"
            fresh.append(name)
        elif said == CHANGED and (name, stat.version) not in self.reported_changes:
            self.reported_changes.add((name, stat.version))
            look.changed[name] = stat

    def _consider(self, name: str, now: float, by_object: dict, look: Look) -> None:
        path = self.root / name
        try:
            stat = stat_of(path)
            look.stats += 1
            same = by_object.get((stat.dev, stat.ino, stat.size, stat.mtime))
            if same is not None:
                look.renamed.append((name, same))
                return
            before = self.seen.get(name)
            settling = (f"it changed {max(now - stat.mtime, 0):.0f} s ago (taken once it stood still for "
                        f"{self.settle_s:g} s)")
            if before is None or before.stat != stat:
                self.seen[name] = _Seen(stat, now, before.look_before if before else self.previous_look)
                look.grew.add(name)
                look.waiting[name] = FIRST_SEEN if before is None else settling
                return
            stood = max(now - before.since, now - stat.mtime)  # a file moved in was written long before
            if stood < self.settle_s:
                look.waiting[name] = settling
                return
            verdict = self._verdict(name, stat, look)
            if verdict.kind == UNFINISHED and stood < self.unfinished_after_s:
                look.waiting[name] = (f"{verdict.why}; taken as it is once it stood still for "
                                      f"{self.unfinished_after_s:g} s")
                return
            look.opened += 1
            landed = Landed(name, stat.size, stat.mtime, _landing_time(stat.mtime, now, before.look_before),
                            stat.dev, stat.ino, head_of(path), unfinished=verdict.why * (verdict.kind == UNFINISHED),
                            unreadable=verdict.why * (verdict.kind == UNREADABLE))
        except FileNotFoundError:  # gone between the listing and now: the next look does not list it
            return
        except OSError as error:
            look.errors[name] = str(error)
            return
        look.landed.append(landed)
        self.taken_not_known.add(name)
        del self.seen[name]

    def _verdict(self, name: str, stat: Stat, look: Look) -> Verdict:
        if name not in self.verdicts or self.verdicts[name][0] != stat:
            look.opened += 1
            self.verdicts[name] = (stat, self.verdict(self.root / name))
        return self.verdicts[name][1]


def _landing_time(mtime: float, now: float, look_before: float | None) -> float:
    """When a file landed: when its last byte was written (its modification time; a rename keeps it), but no
    earlier than the look before the one that first saw it (a file moved in from elsewhere keeps an older time),
    and no later than the look that took it."""
    return min(now, mtime if look_before is None else max(mtime, look_before))


def landing_for(data, known: Callable[[], Mapping[str, Identity]] = dict, *, settle_s: float = 0.0,
                unfinished_after_s: float = 0.0) -> Landing:
    """A watcher of followed data `data` (data/followed.py: its folder, pattern and verdict on a file) that leaves
    the `known` files (the ledger's) alone."""
    return Landing(data.root, data.pattern, data.verdict, known=known, excluded=data.excluded, settle_s=settle_s,
                   unfinished_after_s=unfinished_after_s)
