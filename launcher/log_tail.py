"""The newest lines of a long log that `status` shows: found in its last LOOK_BACK_BYTES at the first look, then
kept up to date from what was appended since, so a look costs what the log grew, however long it is.

Reads the current file and, past a rotation (launcher/log_rotation.py), what was appended to its older file
`.1` before the cut.
"""

from __future__ import annotations

import re
from pathlib import Path

from launcher.log_rotation import rotated

LOOK_BACK_BYTES = 4 << 20  # the first look: the last 4 MiB of the log and its older file (minutes of a busy chief)


class LogTail:
    """For one log: the newest line each pattern finds, and the newest run of lines holding `marker` in which no
    first word repeats (the newest per-ps report: one line per ps, in the order they were written)."""

    def __init__(self, path: Path, patterns: dict[str, re.Pattern], marker: str = ""):
        self.path, self.patterns, self.marker = path, patterns, marker
        self.found: dict[str, re.Match] = {}
        self.block: list[str] = []  # the text after the marker, per line
        self.offset: int | None = None  # bytes of the current file already read; None before the first look

    def update(self) -> "LogTail":
        """Reads what the log gained since the last look (the first look: its last LOOK_BACK_BYTES)."""
        try:
            size = self.path.stat().st_size
        except OSError:
            return self
        if self.offset is None:
            older = max(0, LOOK_BACK_BYTES - size)
            self._read(rotated(self.path, 1), -older if older else None, skip_partial=True)
            self.offset = max(0, size - LOOK_BACK_BYTES)
            self.offset += self._read(self.path, self.offset, skip_partial=self.offset > 0)
            return self
        if size < self.offset:  # rotated: what came after the last look and before the cut is in .1
            self._read(rotated(self.path, 1), self.offset)
            self.offset = 0
        self.offset += self._read(self.path, self.offset)
        return self

    def _read(self, path: Path, start: int | None, *, skip_partial: bool = False) -> int:
        """Takes in the whole lines of `path` from byte `start` (negative: from the end; None: nothing); returns the
        bytes taken (up to the last newline). `skip_partial`: `start` may fall inside a line, drop its rest."""
        if start is None:
            return 0
        try:
            with open(path, "rb") as handle:
                end = handle.seek(0, 2)
                begin = max(0, end + start) if start < 0 else start
                handle.seek(begin)
                chunk = handle.read()
        except OSError:
            return 0
        cut = chunk.rfind(b"\n") + 1
        lines = chunk[:cut].decode(errors="replace").split("\n")[:-1]
        if skip_partial and begin > 0:
            lines = lines[1:]
        for line in lines:
            self._take(line)
        return cut

    def _take(self, line: str) -> None:
        for key, pattern in self.patterns.items():
            match = pattern.search(line)
            if match:
                self.found[key] = match
        if self.marker and self.marker in line:
            text = line.split(self.marker, 1)[1]
            first = text.split()[:1]
            repeated = [i for i, other in enumerate(self.block) if other.split()[:1] == first]
            if repeated:
                self.block = self.block[repeated[0] + 1:]
            self.block.append(text)
