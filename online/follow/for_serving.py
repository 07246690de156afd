"""Checkpoints written for the serving versions of a follow-mode run (`serving_checkpoint` beside, the default), in
output/checkpoints/for-serving/: beside training, so hand-out never drains for a version, and where no resume looks, so
a resumed run's model and ledger agree (such a checkpoint may hold steps of pieces its ledger has not done; without
deltas it lacks the tables' optimizer slots). Each is kept while its version is written and, once published, while that
version is the newest (the base its deltas replay on); a run's start removes what an earlier one left.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tables.streaming.bundle import remove_bundle

FOLDER = "for-serving"


class ForServing:
    """The for-serving folder under the checkpoints directory `checkpoints`, emptied now."""

    def __init__(self, checkpoints: Path):
        self.directory = Path(checkpoints) / FOLDER
        shutil.rmtree(self.directory, ignore_errors=True)  # an earlier run's, whole or half written

    def prefix(self, name: str) -> str:
        """Where checkpoint `name` (e.g. ckpt-0-120) is written."""
        self.directory.mkdir(parents=True, exist_ok=True)
        return str(self.directory / name)

    @staticmethod
    def name(name: str) -> str:
        """Its name relative to the checkpoints directory, as a version's trained_through gives it."""
        return f"{FOLDER}/{name}"

    def holds(self, path: str) -> bool:
        return Path(path).parent == self.directory

    def published(self, path: str) -> None:
        """The version of checkpoint `path` is out: every other checkpoint for serving goes."""
        for index in self.directory.glob("*.index"):
            prefix = str(index.with_suffix(""))
            if prefix != path:
                remove_bundle(prefix)

    def dropped(self, path: str) -> None:
        """The version of checkpoint `path` was not written: its checkpoint goes (a settled one stays)."""
        if self.holds(path):
            remove_bundle(path)
