"""Which files under a data folder are data: names matching a pattern, none hidden by a `.` or `_` part, in natural
name order (day_2 before day_10). Pure Python: no TensorFlow.

The `.`/`_` rule is the convention of Hadoop and Spark writers (`_SUCCESS`, `_temporary/`, `.part-0.crc`) and of
any producer that writes `.day_5.gz.tmp` and renames it. A listing reads directories only (`os.scandir`: each
entry's name, type and inode come with the directory, no `stat` per file), so a look at a folder of many known
files costs one read of each directory; the pattern is the one `Path.glob` takes (`*` within a name, `**` any
depth).
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path
from typing import Callable

NOT_DATA_PREFIXES = (".", "_")

SAMPLE_FILES = 16  # what a followed folder's split() reads: the newest files with bytes (data/followed.py)


def natural_key(name: str) -> list:
    """day_2 before day_10: runs of digits compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def is_data_name(name: str, excluded: Callable[[str], bool] = lambda name: False) -> bool:
    return not any(part.startswith(NOT_DATA_PREFIXES) for part in name.split("/")) and not excluded(name)


def _matches(parts: list[str], pattern: list[str]) -> bool:
    """Path.glob's rule for a relative name: `**` stands for any number of folders, other parts match one part."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return _matches(parts, pattern[1:]) or (bool(parts) and _matches(parts[1:], pattern))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _matches(parts[1:], pattern[1:])


def listing(root: Path, pattern: str, excluded: Callable[[str], bool]) -> dict[str, int]:
    """Each data file under `root` now, by name ('/'-separated), with its inode (a link's target's). An
    OSError (the folder unreadable, a network filesystem's ESTALE) is raised: a partial listing would make
    files look gone."""
    parts = pattern.split("/")
    depth = None if "**" in parts else len(parts)
    found: dict[str, int] = {}
    if parts[-1] == "**":  # as in Path.glob: folders only, so no file
        return found
    _list_into(found, Path(root), "", parts, depth, excluded)
    return found


def _list_into(found: dict, folder: Path, prefix: str, pattern: list[str], depth: int | None, excluded) -> None:
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith(NOT_DATA_PREFIXES):
                continue  # never data, nor anything under it
            name = prefix + entry.name
            if entry.is_dir(follow_symlinks=depth is not None):  # `**` does not follow links (no loops)
                if depth is None or name.count("/") + 1 < depth:
                    _list_into(found, folder / entry.name, name + "/", pattern, depth, excluded)
            elif _matches(name.split("/"), pattern) and not excluded(name):
                inode = _file_inode(entry)
                if inode is not None:
                    found[name] = inode


def _file_inode(entry: os.DirEntry) -> int | None:
    """The inode of the file an entry names: a symbolic link's target's (a link is the file it points to), or None
    when it is no file (a folder, a link to nowhere, gone meanwhile)."""
    try:
        if not entry.is_file():
            return None
        return entry.stat().st_ino if entry.is_symlink() else entry.inode()
    except OSError:
        return None


def data_files(root: Path, pattern: str, excluded: Callable[[str], bool]) -> dict[str, tuple[int, float]]:
    """Size and modification time of each data file under `root` now (complete or not)."""
    found = {}
    for name in listing(root, pattern, excluded):
        try:
            stat = os.stat(Path(root) / name)
        except OSError:  # renamed or removed between the listing and the stat: seen at the next look
            continue
        found[name] = (stat.st_size, stat.st_mtime)
    return found
