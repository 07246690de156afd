"""The part of a follow-mode ledger that is only counts: files done with and gone from the folder, folded away so
the ledger (saved in every checkpoint, summary and serving version) stays the size of the folder however long a
run follows it. Pure Python.

A file is folded once it is done with (trained, quarantined or lost), no name of it is left in the folder, and, if
it was trained, a serving version holds it (its freshness is known). Its examples, steps, skipped records and what
became of it add to the counts; the freshness of the newest RECENT_FRESHNESS folded files is kept for the median.
"""

from __future__ import annotations

import dataclasses
import statistics

RECENT_FRESHNESS = 1000  # freshness values kept of folded files (the summary's median is over these and the rest)


@dataclasses.dataclass
class Compacted:
    """Counts of the files folded away (see the module docstring)."""

    files: int = 0
    examples: int = 0
    steps: int = 0
    skipped_records: int = 0
    quarantined_files: int = 0
    bad_files: int = 0
    lost_files: int = 0
    untrained_bytes: int = 0
    unfinished_files: int = 0
    changed_files: int = 0
    freshness_max: float | None = None
    recent_freshness: list[float] = dataclasses.field(default_factory=list)

    def add(self, entry) -> None:
        """Folds a ledger FileEntry in."""
        self.files += 1
        self.examples += entry.examples
        self.steps += entry.steps
        self.skipped_records += entry.skipped
        self.quarantined_files += entry.outcome == "quarantined"
        self.bad_files += entry.outcome == "bad"
        self.lost_files += entry.outcome == "lost"
        self.untrained_bytes += entry.lost_bytes
        self.unfinished_files += bool(entry.unfinished)
        self.changed_files += bool(entry.changed)
        if entry.freshness_s is not None:
            self.freshness_max = max(self.freshness_max or 0.0, entry.freshness_s)
            self.recent_freshness.append(entry.freshness_s)
            if len(self.recent_freshness) > RECENT_FRESHNESS:
                del self.recent_freshness[:-RECENT_FRESHNESS]

    def problems(self) -> dict:
        return {name: getattr(self, name) for name in ("skipped_records", "quarantined_files", "bad_files",
                                                       "lost_files", "untrained_bytes", "unfinished_files",
                                                       "changed_files")}

    def freshness(self, served: list[float]) -> dict:
        """last, median and max of the freshness of `served` (the folded files' recent ones, then the others')."""
        if not served:
            return {}
        largest = max(max(served), self.freshness_max or 0.0)
        return {"last": round(served[-1], 1), "median": round(statistics.median(served), 1),
                "max": round(largest, 1)}

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict) -> "Compacted":
        return cls(**raw)
