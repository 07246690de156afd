"""Task logs capped in size over weeks: `<job>-<index>.log` is always the current file; past `launcher.log_max_mb`
its text moves to `.log.1` (older ones to `.log.2`, ...; `launcher.log_files_kept` files in all) and it starts
empty again.

The task writes its log through a file descriptor the launcher opened in append mode and never reopens it, so a
rename would leave it writing to the old file: the log is copied, then cut to nothing in place (the next append
lands at its new end). What the task writes between the last copy and the cut, a moment, is lost, a line the copy
saw only in part (the task was writing it) with it, so every file holds whole lines; so is the older text when the
disk has no room for its copy.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

MB = 1 << 20
COPY_BLOCK = 1 << 20


def rotated(path: Path, number: int) -> Path:
    """The `number`-th older file of log `path` (`chief-0.log.1` is the newest of them)."""
    return path.with_name(f"{path.name}.{number}")


def older_files(path: Path) -> list[Path]:
    """Log `path`'s older files that exist, newest first."""
    numbered = [(int(older.name.rsplit(".", 1)[1]), older) for older in path.parent.glob(f"{path.name}.*")
                if older.name.rsplit(".", 1)[1].isdigit()]
    return [older for _, older in sorted(numbered)]


def rotate_if_large(path: Path, *, max_mb: float, files_kept: int) -> bool:
    """Moves the text of log `path` into `.1` (shifting the older ones, dropping the oldest) once it holds more than
    `max_mb`; True when it did. Never raises: a log that cannot be rotated is left as it is, one whose copy finds
    no room (a full disk) is cut without it, which gives the room back."""
    try:
        if path.stat().st_size <= max_mb * MB:
            return False
        for number in range(files_kept - 2, 0, -1):  # files_kept counts the current file: older are .1 to .kept-1
            with contextlib.suppress(FileNotFoundError):
                rotated(path, number).replace(rotated(path, number + 1))
        with contextlib.suppress(FileNotFoundError):
            rotated(path, files_kept).unlink()  # one left by a larger files_kept
        _copy_then_cut(path, rotated(path, 1) if files_kept > 1 else None)
    except OSError:
        return False
    return True


def _copy_then_cut(path: Path, target: Path | None) -> None:
    """Copies `path` to `target` (up to what was written while copying, whole lines), then empties `path` in place."""
    with open(path, "rb") as source:
        if target is not None:
            try:
                with open(target, "wb") as copy:
                    whole = 0  # bytes up to the last line end copied
                    while block := source.read(COPY_BLOCK):  # reads on to the end as the task appends
                        copy.write(block)
                        end = block.rfind(b"\n")
                        whole = copy.tell() - len(block) + end + 1 if end >= 0 else whole
                    copy.truncate(whole)  # a line the task was still writing (seen in part): lost whole
            except OSError:
                target.unlink(missing_ok=True)
        os.truncate(path, 0)
