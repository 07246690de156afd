"""Bad data, counted and bounded: the quarantine report (`output/quarantine.jsonl`) says which files and records
were not trained and why, and the bad-data bound stops a run whose data is plainly wrong.

The report is one JSON object a line: `{"time", "file", "kind", "detail"}` plus `"where"` (positions of skipped
records: byte offsets of a plain file's lines, line numbers of a gzip file's, record numbers of a TFRecord
file's; the first POSITIONS_PER_PIECE of each piece). Kinds: `skipped` (malformed records, skipped and
counted), `quarantined` (a file that cannot be read: never trained, or no further), `bad` (trained, but more
than `max_bad_fraction` of its records malformed), `lost` (removed before it was trained), `unfinished` (taken
as it was, its format not ended), `changed` (changed in place after it was taken). Once it passes
MAX_REPORT_BYTES it is renamed `quarantine.1.jsonl` (replacing the one before) and begun again: at most twice
that on disk.

The bound: a file with more than `max_bad_fraction` of its records malformed is bad; the run stops (one line
naming the newest such files, exit 2) when more than `max_bad_fraction` of the last RECENT_FILES files done with
were bad or quarantined: a schema changed upstream stops the run within a few files, while a few bad files among
many good ones are counted and the run goes on.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from common.errors import Problem, UserError
from online.follow.ledger import BAD, QUARANTINED, RECENT_FILES, Ledger

MAX_REPORT_BYTES = 1 << 20
POSITIONS_PER_PIECE = 8  # positions of skipped records a piece reports (data/followed.py takes as many)


class QuarantineReport:
    """Appends to `path` (output/quarantine.jsonl), bounded as the module docstring says."""

    def __init__(self, path: Path, max_bytes: int = MAX_REPORT_BYTES):
        self.path, self.max_bytes = Path(path), max_bytes

    def record(self, file: str, kind: str, detail: str, where: list | None = None) -> None:
        item = {"time": round(time.time(), 3), "file": file, "kind": kind, "detail": detail}
        if where:
            item["where"] = where
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists() and self.path.stat().st_size >= self.max_bytes:
            self.path.replace(self.path.with_name(self.path.stem + ".1" + self.path.suffix))
        with open(self.path, "a") as handle:
            handle.write(json.dumps(item) + "\n")


def check_bound(ledger: Ledger, fraction: float, data_dir: str) -> None:
    """Stops the run (UserError) when more than `fraction` of the last RECENT_FILES files done with were bad."""
    recent = list(ledger.recent)
    bad = sum(outcome in (BAD, QUARANTINED) for outcome in recent)
    if bad <= fraction * RECENT_FILES:
        return
    named = [entry.name for entry in reversed(ledger.files) if entry.outcome in (BAD, QUARANTINED)][:3]
    raise UserError(Problem(
        "training.data_dir", data_dir, f"{bad} of the last {len(recent)} files were bad or could not be read (more "
        f"than training.max_bad_fraction {fraction:g} of {RECENT_FILES}; the newest: {', '.join(named)}; "
        "see output/quarantine.jsonl)", "fix the producer (a changed format?) and remove or replace those files, "
        "or raise training.max_bad_fraction"))
