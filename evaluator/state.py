"""The evaluator's state file, `checkpoints/evaluated.json`: what it has read, the results, and the best.

The coordinator deletes an old checkpoint only once its name is in `evaluated` (see coordinator/checkpoints.py),
and a restarted evaluator skips those names, so no checkpoint is evaluated twice.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from coordinator.checkpoints import EVALUATED_FILE


@dataclasses.dataclass
class EvaluationState:
    """Names done with (evaluated or skipped), per-checkpoint results, skip reasons and the best name."""

    path: Path
    evaluated: list[str] = dataclasses.field(default_factory=list)
    results: dict[str, dict] = dataclasses.field(default_factory=dict)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    best: str | None = None

    @classmethod
    def load(cls, checkpoint_dir: Path) -> "EvaluationState":
        path = checkpoint_dir / EVALUATED_FILE
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            return cls(path)
        return cls(path, list(raw.get("evaluated", [])), dict(raw.get("results", {})),
                   dict(raw.get("skipped", {})), raw.get("best"))

    def save(self) -> None:
        """Replaces the file atomically: the coordinator may read it at any moment."""
        document = {k: v for k, v in dataclasses.asdict(self).items() if k != "path"}
        partial = self.path.with_suffix(".partial")
        partial.write_text(json.dumps(document, indent=2))
        partial.replace(self.path)

    def record(self, name: str, result: dict) -> None:
        self.evaluated.append(name)
        self.results[name] = result

    def skip(self, name: str, reason: str) -> None:
        self.evaluated.append(name)
        self.skipped[name] = reason
