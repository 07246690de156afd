"""What an exporter is asked to write, and what it answers: JSON files the caller and the exporter process share."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

VERSION, MODEL, BEST = "version", "model", "best"  # a serving version; output/model; output/best_model


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExportRequest:
    """Write checkpoint `checkpoint` as `kind` into `destination` (the serving folder for a version, else the model
    folder), for the run of TrainingOptions `options` (as a dict); `reference` is an .npz of raw inputs and the
    trained model's predictions on them, which the written model must match (with `against_checkpoint`, the
    checkpoint's own predictions on them instead: the model moved on); a version gets number `version`,
    `trained_through` as assets.extra/trained_through.json and the newest `keep` versions stay; with
    `delta_from_step` a version takes deltas (online/publish/delta_signatures.py) from that step on."""

    kind: str
    checkpoint: str
    destination: str
    options: dict
    reference: str
    task: str = "exporter"
    version: int | None = None
    trained_through: dict | None = None
    keep: int = 5
    against_checkpoint: bool = False
    delta_from_step: int | None = None

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def load(cls, path: Path) -> "ExportRequest":
        return cls(**json.loads(path.read_text()))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExportResult:
    """What was written: its `path` (and each format's, `paths`), the export check's `largest` difference, the
    seconds and bytes it took (`linked_bytes` of them the checkpoint's own files, linked) and the exporter's peak
    resident memory; or `error`, one line saying what went
    wrong, `fatal` when trying again cannot help (the export check failed, the checkpoint lacks the model)."""

    path: str = ""
    paths: dict = dataclasses.field(default_factory=dict)
    largest: float = 0.0
    seconds: float = 0.0
    bytes: int = 0
    linked_bytes: int = 0
    version: int | None = None
    written: float = 0.0
    peak_rss_mb: float = 0.0
    error: str = ""
    fatal: bool = False

    def save(self, path: Path) -> None:
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(dataclasses.asdict(self)))
        partial.replace(path)

    @classmethod
    def load(cls, path: Path) -> "ExportResult | None":
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None
