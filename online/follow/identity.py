"""A landed file's identity: what makes a file under a name "the same file" as one the ledger holds. Pure Python.

A file is the same file as one taken before when its size, modification time and first bytes (up to HEAD_BYTES)
are the ones it had when taken: its device and inode say which file object a name holds, and spare a look at its
bytes while they stay the same, but never alone make a file new (`judge`). So:

- a rename (or a hard link) keeps device, inode, size and time: the same file under a new name, never trained
  again, found without opening it;
- the same files reached through another device or other inodes (the folder on another node's NFS, Lustre or
  CephFS mount, a remount, a FUSE mount, a `cp -p` or `rsync -a` copy) keep size, time and first bytes: the same
  files, not trained again, their new device and inode recorded;
- a symbolic link is its target: what a link points to is stat'ed, so a link repointed at another file is a new
  file, and one left alone is trained once;
- a copy that does not keep the modification time (`cp`), or a new file under an old name, has another time or
  other first bytes: a new file, trained;
- the same inode with the same first bytes but another size or time was changed in place after it was taken:
  reported and counted, not trained again (what was taken is in the model; a writer must not change a file
  once it stood still for `settle_s`);
- a file taken empty that later holds data is a new file (nothing of it was trained).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

HEAD_BYTES = 4096


@dataclasses.dataclass(frozen=True)
class Stat:
    """What a stat says of a file: device, inode, size, modification time."""

    dev: int
    ino: int
    size: int
    mtime: float

    @property
    def version(self) -> tuple[int, float]:
        return self.size, self.mtime


def stat_of(path: Path | str) -> Stat:
    """The file's Stat (raises OSError: gone, or unreadable now)."""
    found = os.stat(path)
    return Stat(found.st_dev, found.st_ino, found.st_size, found.st_mtime)


def head_of(path: Path | str, length: int = HEAD_BYTES) -> str:
    """A digest of the file's first `length` bytes (fewer if it is shorter) and how many there were."""
    with open(path, "rb") as handle:
        head = handle.read(length)
    return f"{len(head)}:{hashlib.blake2b(head, digest_size=8).hexdigest()}"


def head_length(head: str) -> int:
    return int(head.split(":", 1)[0])


@dataclasses.dataclass(frozen=True)
class Identity:
    """A taken file as the ledger records it: its Stat when taken and its head (`head_of`); `ino` and `head` are
    None in a ledger written before identities were recorded (a name and its version then decide)."""

    size: int
    mtime: float
    dev: int | None = None
    ino: int | None = None
    head: str | None = None

    @property
    def version(self) -> tuple[int, float]:
        return self.size, self.mtime

    def same_object(self, stat: Stat) -> bool:
        """The same file object (device and inode) as `stat` says, when known."""
        return self.ino is not None and (self.dev, self.ino) == (stat.dev, stat.ino)


SAME, MOVED, CHANGED, NEW = "same", "moved", "changed in place", "new"  # what `judge` says of a known name


def judge(taken: Identity, stat: Stat, path: Path | str) -> str:
    """What the file now at a taken name is: SAME (as taken), MOVED (the same file reached through another device
    or inode: record its `stat`), CHANGED (that file changed in place) or NEW (another file under the name). Opens
    the file only when its device or inode, and not its version, changed."""
    if taken.ino is None:  # an older ledger's entry: no inode, no head; its version decides
        return MOVED if taken.version == stat.version else CHANGED
    if taken.version == stat.version:
        if taken.same_object(stat):
            return SAME
        return MOVED if taken.head is not None and _head_is(taken, path) else NEW
    if not taken.same_object(stat) or taken.size == 0:
        return NEW
    return CHANGED if taken.head is None or _head_is(taken, path) else NEW


def _head_is(taken: Identity, path: Path | str) -> bool:
    return head_of(path, head_length(taken.head)) == taken.head
