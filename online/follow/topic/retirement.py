"""Which trained ranges leave a topic's stream (output_dir/stream): those a settled checkpoint holds
(safe_to_delete.json lists them) once listed for KEEP_TRAINED_S, so a reader that listed them (the exporter, the
evaluator) has read them by then, and never the newest SAMPLE_FILES, the sample those readers take. Pure Python."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from data.folder import SAMPLE_FILES
from online.follow.run_record import SAFE_TO_DELETE

KEEP_TRAINED_S = 60.0


class Retirement:
    """Ranges of the stream `root` trained as `output`/safe_to_delete.json says."""

    def __init__(self, root: Path, output: Path, keep_s: float = KEEP_TRAINED_S):
        self.root, self.output, self.keep_s = root, output, keep_s
        self._listed: dict[str, float] = {}  # trained ranges: when safe_to_delete.json first listed each

    def trained(self) -> set[str]:
        """The ranges the newest settled checkpoint holds."""
        try:
            return set(json.loads((self.output / SAFE_TO_DELETE).read_text()).get("files", []))
        except (OSError, ValueError):
            return set()

    def due(self, trained: set[str], present: list[str]) -> set[str]:
        """Of the ranges `present`, those to remove now."""
        now = time.monotonic()
        self._listed = {name: self._listed.get(name, now) for name in trained}
        return {name for name, since in self._listed.items() if now - since >= self.keep_s} - _newest(self.root,
                                                                                                      present)


def _newest(root: Path, present: list[str]) -> set[str]:
    """The SAMPLE_FILES newest of the ranges `present` by landing time (their files' modification time)."""
    times = []
    for name in present:
        try:
            times.append((os.stat(root / name).st_mtime, name))
        except FileNotFoundError:
            continue
    return {name for _, name in sorted(times)[-SAMPLE_FILES:]}
