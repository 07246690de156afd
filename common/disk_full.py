"""A full disk, found in whatever error it raised, told in one line (the path, its filesystem, the space left) and
exit 5: a restart would only meet the same wall, so the launcher stops the run instead (docs/running.md).

A task that finds its disk full must still write that line and its exit file, often on the same filesystem: it
keeps a small reserve file beside its exit file from the start and deletes it first.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import sys
from pathlib import Path

from common.errors import DISK_FULL_EXIT_CODE
from common.exit_file import EXIT_FILE_VARIABLE

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
FULL_TEXT = re.compile(r"No space left on device|Disk quota exceeded")
PATH_BEFORE = re.compile(r"(/[^\s;:'\"]+?)(?:\.tempstate\d+)?;? (?:No space left on device|Disk quota exceeded)")
RESERVE_BYTES = 256 << 10  # room for the error line and the exit file once the reserve is given back
LINE_MARK = "disk full:"


def full_disk_path(error: BaseException) -> str | None:
    """'' or the path named when `error` (or one it was raised from) says the disk is full; None otherwise."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in FULL_ERRNOS:
            return str(error.filename or "")
        found = FULL_TEXT.search(str(error))
        if found:  # TensorFlow's errors carry the text, not the errno: "<path>.tempstate123; No space left ..."
            named = PATH_BEFORE.search(str(error))
            return named[1] if named else ""
        error = error.__cause__ or error.__context__
    return None


def _size(count: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024
    return ""


def _mount_of(path: Path) -> tuple[str, str, str]:
    """(mount point, filesystem type, device) of the filesystem holding `path`, from /proc/self/mountinfo."""
    best = ("/", "?", "?")
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return best
    for line in lines:
        left, _, right = line.partition(" - ")
        point = re.sub(r"\\([0-7]{3})", lambda code: chr(int(code[1], 8)), left.split()[4])  # \040: a space
        fstype, device = (right.split() + ["?", "?"])[:2]
        if (str(path) == point or str(path).startswith(point.rstrip("/") + "/")) and len(point) >= len(best[0]):
            best = (point, fstype, device)
    return best


def describe(path: Path) -> str:
    """`<mount> (<type> <device>) has <free> free of <size>`: the filesystem of `path` (or of its nearest existing
    folder)."""
    existing = path.resolve()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    point, fstype, device = _mount_of(existing)
    try:
        space = os.statvfs(existing)
        free = f"{_size(space.f_bavail * space.f_frsize)} free of {_size(space.f_blocks * space.f_frsize)}"
    except OSError as error:
        free = f"free space unknown ({error.strerror})"
    return f"{point} ({fstype} {device}) has {free}"


def line(path: Path, named: bool) -> str:
    """The one line a task says when its disk is full (`named`: `path` is the file it could not write, else the
    folder it writes under)."""
    where = f"could not write {path}" if named else f"could not write under {path}"
    return (f"{LINE_MARK} {where}: {describe(path)}; free space there (or point training.output_dir at a larger "
            "disk), then `sh run.sh` resumes from the last checkpoint")


def _reserve_path() -> Path | None:
    exit_file = os.environ.get(EXIT_FILE_VARIABLE)
    return Path(exit_file).with_suffix(".reserve") if exit_file else None


def _keep_reserve() -> None:
    path = _reserve_path()
    if path is not None:
        with contextlib.suppress(OSError):
            path.write_bytes(b"\0" * RESERVE_BYTES)


def _give_back_reserve() -> None:
    path = _reserve_path()
    if path is not None:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def exit_on_full_disk(log, writes_under: Path):
    """Inside: an error that says the disk is full logs one line (the path it names, else `writes_under`, with its
    filesystem and free space) and exits 5, without a traceback."""
    _keep_reserve()
    try:
        yield
    except BaseException as error:
        named = full_disk_path(error)
        if named is None:
            raise
        _give_back_reserve()
        log.error("%s", line(Path(named) if named else writes_under, named=bool(named)))
        sys.exit(DISK_FULL_EXIT_CODE)
    finally:
        _give_back_reserve()
