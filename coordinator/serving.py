"""Serving versions: `output/serving/<version>/`, the layout TensorFlow Serving watches, written while training goes on.

Each version is a SavedModel of the exported model, which takes the features as they are in the data (the
raw-feature export, coordinator/raw_export.py: Criteo's integers and hex strings, a TFRecord schema's features
or its serialized records), with `assets.extra/trained_through.json` (what it has trained on: each file done,
and the file and position it stands in) and `assets.extra/reference_predictions.npz` (raw inputs and the trained
model's predictions on them, so a reader can check what it loaded). A version is written under a hidden name
and renamed into place, so a reader never sees half of one; versions are increasing integers (the largest is
the newest, as TensorFlow Serving reads them); the newest `keep` stay.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Callable

import numpy as np
import tf_keras

from coordinator.export import saved_inputs

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

    def trained_through(self, version: int) -> dict:
        return json.loads((self.directory / str(version) / EXTRA / TRAINED_THROUGH).read_text())

    def write(self, model: tf_keras.Model, *, describe: Callable[[int, float], dict], inputs,
              predictions: np.ndarray, signatures: dict | None = None) -> tuple[int, Path]:
        """Writes the next version of `model` (as exported: the model a reader calls, with `signatures` beside
        Keras' own); `describe(version, written)` gives its trained_through record."""
        version = max(self.versions(), default=0) + 1
        writing = self.directory / f"{WRITING_PREFIX}{version}"
        model.save(writing, save_format="tf", include_optimizer=False, signatures=signatures)
        extra = writing / EXTRA
        extra.mkdir(exist_ok=True)
        (extra / TRAINED_THROUGH).write_text(json.dumps(describe(version, time.time()), indent=1))
        np.savez(extra / REFERENCE, predictions=predictions, **saved_inputs(inputs))
        final = self.directory / str(version)
        writing.rename(final)
        self._prune()
        return version, final

    def _prune(self) -> None:
        for old in self.versions()[:-self.keep]:
            shutil.rmtree(self.directory / str(old), ignore_errors=True)
