"""Bytes that follow churn: a delta that would carry more than half its version's bytes is not written, and a version
is written in its place (said once a run).

A delta carries every row changed since the one before, with its slots, and every dense weight; under heavy churn
(new ids all day, most of a table's rows touched between two deltas) that is most of a version, read by the follower
on top of the version it already holds. A version then costs the reader less, and starts a chain whose deltas are
again small. The deltas' own writer counts the changed rows on their ps first (one call per shard, the same count a
delta's read makes), so a delta too large is never read. Below `serving_delta_switch_mb` a delta is always written:
a version's fixed costs (its checkpoint, an exporter process, its graph) outweigh a few MB.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from online.publish.versions import weight_bytes


@dataclasses.dataclass(frozen=True)
class Oversized:
    """Delta `sequence` of `version`, not written: it would have carried `bytes`, past `limit`."""

    version: int
    sequence: int
    bytes: int
    limit: float


class ChurnSwitch:
    """Whether the next delta is written or replaced by a version; `floor_mb`: the size below which it is written."""

    def __init__(self, floor_mb: float, log):
        self.floor, self.log = floor_mb * 1e6, log
        self.version_bytes = 0
        self.limit: float | None = None  # None: every delta is written (no version to compare with, or one failed)
        self.version_wanted = False
        self.said = False

    def based_on(self, version: Path) -> None:
        """A new chain on the published `version` (its folder): its deltas are measured against its weights (every
        one written when the folder cannot be read)."""
        self.version_wanted = False
        try:
            self.version_bytes = weight_bytes(version)
        except OSError:
            self.limit = None
            return
        self.limit = max(self.version_bytes / 2, self.floor)

    def release(self) -> None:
        """The version asked for is not published: this chain's deltas carry what they must, whatever their size."""
        self.limit, self.version_wanted = None, False

    def too_large(self, changed_bytes: int) -> bool:
        return self.limit is not None and changed_bytes > self.limit

    def replace(self, oversized: Oversized) -> None:
        """Records a delta not written: a version is wanted now."""
        self.version_wanted = True
        if not self.said:
            self.said = True
            self.log.info("serving | delta %d.%d would carry %s, more than half of version %d's %s: a version is "
                          "written instead, now and whenever a delta would (said once; a delta under "
                          "training.serving_delta_switch_mb is always written)", oversized.version,
                          oversized.sequence, size_text(oversized.bytes), oversized.version,
                          size_text(self.version_bytes))


def size_text(size: int) -> str:
    """Bytes as a person reads them: MB from one MB up, else KB."""
    return f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.1f} KB"
