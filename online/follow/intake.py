"""What each look at the folder means for the ledger: files taken (trained, or quarantined at once when they cannot
be read), held files renamed, removed (lost, if not yet trained), changed in place, and files still waiting; each
said once in the chief's log and, when something is not trained, written to the quarantine report."""

from __future__ import annotations

from online.follow.landing import FIRST_SEEN, Look
from online.follow.file_entry import LOST, QUARANTINED, FileEntry
from online.follow.ledger import Ledger
from online.follow.quarantine import QuarantineReport, check_bound
from data.pieces import whole_file


def size_text(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size} bytes"


class Intake:
    """Takes looks (online/follow/landing.py) into the `ledger`; `data` is the FollowedData, `report` the
    FollowReport, `quarantine` the QuarantineReport; `max_bad_fraction` bounds bad data (quarantine.py)."""

    def __init__(self, *, ledger: Ledger, data, report, quarantine: QuarantineReport, max_bad_fraction: float):
        self.ledger, self.data, self.report, self.quarantine = ledger, data, report, quarantine
        self.max_bad_fraction = max_bad_fraction
        self.waiting: dict[str, str] = {}
        self.looks = 0

    def take(self, look: Look, now: float) -> bool:
        """Records one look; True when something happened (a file landed, grew, left or failed to be read)."""
        self.looks += 1
        if self.looks == 1:
            self.report.log.info("first look at %s: %d files, %d held by the ledger (not opened again), %d stat'ed, "
                                 "%d opened", self.data.root, look.listed, look.held, look.stats, look.opened)
        for name, stat in look.adopted.items():
            self.ledger.adopt(name, stat)
        moved = [name for name, stat in look.moved.items() if self.ledger.adopt(name, stat)]  # once: looks queue
        if moved:
            self.report.log.info("%d held file(s) reached through another device or inode now (e.g. %s: another "
                                 "node's mount, a remount or a copy that kept its times); size, time and first bytes "
                                 "are as taken: not trained again", len(moved), min(moved))
        for new, old in look.renamed:
            if self.ledger.renamed(new, old) is not None:
                self.report.once(f"{new}\0renamed", "%s: the same file as %s (renamed or linked: same inode, size "
                                 "and time), taken before: not trained again", new, old)
        for name, why in look.gone.items():
            self._gone(name, why, now)
        for name, stat in look.changed.items():
            self._changed(name, stat)
        for landed in look.landed:
            self._landed(landed, now)
        for name, why in look.waiting.items():
            if why != FIRST_SEEN:  # a file's first look cannot tell
                self.report.once(f"{name}\0{why.split(' s ago')[-1]}", "%s: not taken yet: %s", name, why)
        for name, error in look.errors.items():
            self.ledger.io_errors += 1
            self.report.once(f"{name}\0io", "%s: cannot be read now (%s); tried again at every look (I/O errors "
                             "are counted in the summary)", name or f"the data folder {self.data.root}", error)
        waited, self.waiting = bool(self.waiting) and not look.waiting, look.waiting
        if look.gone:
            self.ledger.compact(now)
        check_bound(self.ledger, self.max_bad_fraction, str(self.data.root))
        return bool(look.landed or look.grew or look.gone or look.errors or waited)  # waited: idle from now

    def _landed(self, landed, now: float) -> None:
        if self.ledger.entry_named(landed.name) is not None:  # known meanwhile (a look queued before the ledger had it)
            return
        pieces = whole_file(landed.name) if landed.unreadable else self.data.pieces(landed.name, landed.size)
        entry = self.ledger.add(landed, pieces, now)
        self.report.landed(entry, now)
        if entry.outcome == QUARANTINED:
            self.quarantined(entry, entry.note)
        elif entry.unfinished:
            self.report.log.info("%s: taken as it is: %s", entry.name, entry.unfinished)
            self.quarantine.record(entry.name, "unfinished", entry.unfinished)
        if entry.complete and entry.outcome != QUARANTINED:
            self.report.done(entry)

    def quarantined(self, entry: FileEntry, why: str) -> None:
        self.report.log.info("%s: quarantined: it %s (%s of it not trained; see quarantine.jsonl)", entry.name, why,
                             size_text(entry.lost_bytes))
        self.quarantine.record(entry.name, QUARANTINED, why)

    def _gone(self, name: str, why: str, now: float) -> None:
        entry = self.ledger.gone(name, now)
        if entry is None or entry.complete:
            return  # still there under another name, or done with: a file may go once trained
        pieces = f"{len(entry.pieces) - len(entry.done)} of {entry.piece_count} pieces"
        self.ledger.end(entry, LOST, f"{why} before it was trained", now)
        self.report.log.info("%s: %s before it was trained: counted as lost (%s, %s not trained; a file may go "
                             "once output/safe_to_delete.json lists it)", name, why, pieces,
                             size_text(entry.lost_bytes))
        self.quarantine.record(name, LOST, entry.note)

    def _changed(self, name: str, stat) -> None:
        entry = self.ledger.entry_named(name)
        if entry is None:
            return
        entry.changed += 1
        grown = stat.size - entry.size
        more = f", {size_text(grown)} more" if grown > 0 else ""
        self.report.log.info("%s: changed in place after it was taken (now %s%s); it is not trained again (new data "
                             "needs a new file, or a longer training.settle_s)", name, size_text(stat.size), more)
        self.quarantine.record(name, "changed", f"size {entry.size} -> {stat.size} after it was taken")
