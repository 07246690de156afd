"""Publication that survives a host crash: what a rename publishes is flushed to disk first, its folder after, and
`output_dir` is refused on object-store mounts, where rename is not atomic."""

from __future__ import annotations

import os
import re
from pathlib import Path

from common.errors import Problem, UserError

MOUNTS = Path("/proc/self/mounts")
# FUSE clients of object stores (the `fuse.<name>` type, or the source of a plain `fuse` mount such as
# mountpoint-s3's): a rename there is a copy then a delete, so a reader can see half a folder
OBJECT_STORES = frozenset({"gcsfuse", "s3fs", "goofys", "rclone", "mountpoint-s3", "blobfuse", "blobfuse2",
                           "geesefs", "ossfs", "cosfs", "obsfs"})


def sync_file(path: Path | str) -> None:
    """Flushes the file at `path` to disk (data and size)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def sync_folder(path: Path | str) -> None:
    """Flushes the folder at `path` itself: the names it holds, not what they hold."""
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def sync_tree(path: Path | str) -> None:
    """Flushes every file under folder `path`, then every folder from the deepest up to `path` itself (a file
    alone when `path` is one); symbolic links are not followed, their folder records them."""
    if not os.path.isdir(path):
        sync_file(path)
        return
    folders = []
    for folder, _, files in os.walk(path):  # parents before children: reversed below, children first
        folders.append(folder)
        for name in files:
            if not os.path.islink(os.path.join(folder, name)):
                sync_file(os.path.join(folder, name))
    for folder in reversed(folders):
        sync_folder(folder)


def rename(source: Path, destination: Path) -> None:
    """Renames `source` to `destination` (replacing a file there) and flushes the folders that record it."""
    os.replace(source, destination)
    for folder in {source.parent, destination.parent}:
        sync_folder(folder)


def publish(source: Path, destination: Path) -> None:
    """Puts `source`, a file or folder written whole, in place as `destination`: flushed first, so that after a
    host crash a reader finds the old one or the new one whole, never a name holding empty files."""
    sync_tree(source)
    rename(source, destination)


def _unescaped(field: str) -> str:
    """A /proc/mounts field as the path it names (`\\040` is a space, `\\011` a tab, `\\134` a backslash)."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def mount_of(path: str, mounts: str) -> tuple[str, str, str]:
    """(mount point, file system type, source) of the mount that holds absolute, resolved `path`, from the text of
    /proc/self/mounts: the longest mount point that is `path` or a folder above it (the last listed of equal
    ones: it was mounted over the others); ("", "", "") when none is."""
    found = ("", "", "")
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        source, point, kind = _unescaped(fields[0]), _unescaped(fields[1]), fields[2]
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(found[0]):
            found = (point, kind, source)
    return found


def object_store(kind: str, source: str) -> str | None:
    """The object store a mount of type `kind` from `source` reaches (its FUSE client's name), or None for a file
    system whose rename is atomic (local disks, NFS, Lustre, CephFS, and FUSE file systems not listed)."""
    base, _, subtype = kind.partition(".")
    if base not in ("fuse", "fuseblk"):
        return None
    name = subtype or os.path.basename(source)
    return name if name in OBJECT_STORES else None


def object_store_problem(path: str, field: str, mounts: Path | None = None) -> Problem | None:
    """The problem naming `field` when folder `path` (existing or not) lies on an object-store mount, else None."""
    try:
        text = (mounts or MOUNTS).read_text()
    except OSError:  # no /proc (not Linux): nothing to judge by
        return None
    point, kind, source = mount_of(os.path.realpath(path), text)
    store = object_store(kind, source)
    if not store:
        return None
    return Problem(field, path, f"is on a {store} mount ({point}, type {kind}) where rename is not atomic, so a "
                   "reader could find half a serving version, delta or model",
                   "put output_dir on a local disk, NFS, Lustre or CephFS (docs/online-training.md)")


def refuse_object_store(path: str, field: str, mounts: Path | None = None) -> None:
    """Raises a UserError naming `field` when folder `path` (existing or not) lies on an object-store mount."""
    problem = object_store_problem(path, field, mounts)
    if problem is not None:
        raise UserError(problem)
