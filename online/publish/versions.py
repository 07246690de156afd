"""Serving versions: `output/serving/<version>/`, the layout TensorFlow Serving watches, written while training goes on.

Each version is a SavedModel of the exported model, which takes the features as they are in the data (the
raw-feature export, models/raw_export.py: Criteo's integers and hex strings, a TFRecord schema's features
or its serialized records), with `assets.extra/trained_through.json` (what it has trained on: each file done,
and the file and position it stands in) and `assets.extra/reference_predictions.npz` (raw inputs and the trained
model's predictions on them, so a reader can check what it loaded). A version is written under a hidden name,
flushed to disk (common/durable.py) and renamed into place, so a reader never sees half of one, even after a host
crash; versions are increasing integers (the largest is the newest, as TensorFlow Serving reads them); the newest
`keep` stay.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from common import durable

WRITING_PREFIX = ".writing-"  # not an integer: TensorFlow Serving ignores it, and so does `versions`
EXTRA = "assets.extra"
TRAINED_THROUGH = "trained_through.json"
REFERENCE = "reference_predictions.npz"


class ServingVersions:
    """The versions under `directory`; leftovers of a write that died midway are removed on opening."""

    def __init__(self, directory: Path, keep: int):
        self.directory, self.keep = directory, keep
        directory.mkdir(parents=True, exist_ok=True)
        for leftover in directory.glob(WRITING_PREFIX + "*"):
            shutil.rmtree(leftover, ignore_errors=True)

    def versions(self) -> list[int]:
        return sorted(int(p.name) for p in self.directory.iterdir() if p.name.isdigit() and p.is_dir())

    def next_number(self) -> int:
        return max(self.versions(), default=0) + 1

    def trained_through(self, version: int) -> dict:
        return json.loads((self.directory / str(version) / EXTRA / TRAINED_THROUGH).read_text())

    def newest_trained_through(self) -> dict | None:
        """The newest version's trained_through record, or None when there is none."""
        versions = self.versions()
        return self.trained_through(versions[-1]) if versions else None

    def writing(self, version: int) -> Path:
        """Where version `version` is written before it is published."""
        return self.directory / f"{WRITING_PREFIX}{version}"

    def publish(self, version: int) -> Path:
        """Renames the written version into place, flushed to disk first, and drops the oldest beyond `keep`;
        returns its path."""
        final = self.directory / str(version)
        durable.publish(self.writing(version), final)
        for old in self.versions()[:-self.keep]:
            shutil.rmtree(self.directory / str(old), ignore_errors=True)
        return final


def weight_bytes(version: Path) -> int:
    """Bytes of the weights a published version holds (its SavedModel's variables), as a delta's are counted."""
    return sum(path.stat().st_size for path in (version / "variables").iterdir() if path.is_file())
