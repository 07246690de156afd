"""What the launcher shows a person: its own lines, and the lead's and evaluator's task-prefixed log lines.

Only the toolkit's own lines reach the console: TensorFlow's C++ lines (oneDNN notices, absl warnings, gRPC
errors) carry no `[job:index]` prefix and stay in the task logs.
"""

from __future__ import annotations

import re
import sys
import time

from cluster.config import ClusterConfig


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
            if path.stat().st_size < self.offsets[path]:
                self.offsets[path] = 0  # a fresh copy fetched from a remote host
            with open(path, "rb") as handle:
                handle.seek(self.offsets[path])
                chunk = handle.read()
            cut = chunk.rfind(b"\n") + 1  # whole lines only
            self.offsets[path] += cut
            sys.stderr.write(own_lines(chunk[:cut].decode(errors="replace")))
        sys.stderr.flush()
