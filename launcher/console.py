"""What the launcher shows a person: its own lines, and the lead's and evaluator's task-prefixed log lines.

Only the toolkit's own lines reach the console: TensorFlow's C++ lines (oneDNN notices, absl warnings, gRPC
errors) carry no `[job:index]` prefix and stay in the task logs.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from cluster.config import ClusterConfig
from launcher.log_rotation import rotated


def say(message: str) -> None:
    print(f"[launcher] {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


TASK_LINE = re.compile(r"^\[[a-z]+:\d+\] ")


def own_lines(text: str) -> str:
    """The lines of `text` that the toolkit wrote (task-prefixed), each with its newline."""
    return "".join(line for line in text.splitlines(keepends=True) if TASK_LINE.match(line))


class LogFollower:
    """Echoes new lines of the lead trainer's and evaluator's logs (already prefixed with their task)."""

    def __init__(self, config: ClusterConfig):
        logs = config.path(config.launcher.logs_dir)
        shown = [config.lead, *config.tasks(("evaluator",))]
        self.paths = [logs / f"{t.job}-{t.index}.log" for t in shown]
        self.offsets = {path: path.stat().st_size if path.exists() else 0 for path in self.paths}

    def echo_new_lines(self) -> None:
        for path in self.paths:
            if not path.exists():
                continue
            if path.stat().st_size < self.offsets[path]:  # rotated (its text moved to .1), or a fresh remote copy
                self._echo(rotated(path, 1), self.offsets[path], whole=True)  # what came since the last look
                self.offsets[path] = 0
            self.offsets[path] += self._echo(path, self.offsets[path])
        sys.stderr.flush()

    @staticmethod
    def _echo(path: Path, offset: int, whole: bool = False) -> int:
        """Echoes the toolkit's lines of `path` from byte `offset` (whole lines only, unless `whole`); returns the
        bytes taken."""
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
        except OSError:
            return 0
        cut = len(chunk) if whole else chunk.rfind(b"\n") + 1
        sys.stderr.write(own_lines(chunk[:cut].decode(errors="replace")))
        return cut
