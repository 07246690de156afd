"""The run summary `OUTPUT/summary.json`: written by the chief, read by the evaluator and the launcher."""

from __future__ import annotations

import json
from pathlib import Path

SUMMARY_NAME = "summary.json"
RUNNING = "running"
COMPLETE = "complete"


def read_summary(output: Path) -> dict:
    """The summary, or {} when there is none yet (or it cannot be read)."""
    try:
        return json.loads((output / SUMMARY_NAME).read_text())
    except (OSError, ValueError):
        return {}


def write_summary(output: Path, summary: dict) -> None:
    """Replaces summary.json atomically, so a reader never sees half of it."""
    output.mkdir(parents=True, exist_ok=True)
    partial = output / (SUMMARY_NAME + ".partial")
    partial.write_text(json.dumps(summary, indent=2))
    partial.replace(output / SUMMARY_NAME)


def training_finished(output: Path, planned_epochs: int) -> bool:
    """True once the chief has marked this plan complete (a stale summary of a shorter plan does not count)."""
    summary = read_summary(output)
    return summary.get("status") == COMPLETE and summary.get("epochs") == planned_epochs
