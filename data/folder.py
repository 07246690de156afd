"""Which files under a data folder are data: names matching a pattern, none hidden by a `.` or `_` part, in natural
name order (day_2 before day_10). Pure Python: no TensorFlow.

The `.`/`_` rule is the convention of Hadoop and Spark writers (`_SUCCESS`, `_temporary/`, `.part-0.crc`) and of
any producer that writes `.day_5.gz.tmp` and renames it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

NOT_DATA_PREFIXES = (".", "_")


def natural_key(name: str) -> list:
    """day_2 before day_10: runs of digits compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def is_data_name(name: str, excluded: Callable[[str], bool] = lambda name: False) -> bool:
    return not any(part.startswith(NOT_DATA_PREFIXES) for part in name.split("/")) and not excluded(name)


def data_files(root: Path, pattern: str, excluded: Callable[[str], bool]) -> dict[str, tuple[int, float]]:
    """Size and modification time of each data file under `root` now (complete or not)."""
    found = {}
    for path in root.glob(pattern):
        name = path.relative_to(root).as_posix()
        if not is_data_name(name, excluded):
            continue
        try:
            if path.is_file():
                stat = path.stat()
                found[name] = (stat.st_size, stat.st_mtime)
        except OSError:  # renamed or removed between the listing and the stat: seen at the next look
            continue
    return found
