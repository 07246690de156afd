"""A landed file's identity: what makes a file under a name "the same file" as one the ledger holds. Pure Python.

A file is the same file as one taken before when it has the same device and inode (the file itself, whatever its
name) and the same first bytes as when it was taken (up to HEAD_BYTES; a filesystem gives a deleted file's inode
to the next file made, so the inode alone cannot tell a rewrite in place from a new file). Its version is its
size and modification time. So:

- a rename (or a hard link) keeps device, inode, size and time: the same file under a new name, never trained
  again, found without opening it;
- a copy (`cp`, an rsync re-copy: rsync writes a temporary file and renames it over the old one) is a new inode:
  a new file, trained (again);
- a new file under an old name (the old one deleted or renamed over) is a new inode, or the old inode with other
  first bytes: a new file;
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

    def unchanged(self, stat: Stat) -> bool:
        """`stat` is this file as taken: the same object (when known), size and time."""
        return (self.ino is None or self.same_object(stat)) and (self.size, self.mtime) == stat.version


def same_file_changed(taken: Identity, stat: Stat, path: Path | str) -> bool:
    """Whether a file whose version is no longer `taken`'s is that file changed in place (True) or a new file
    under its name (False); reads its first bytes only when device and inode are the same."""
    if taken.ino is None:  # an older ledger's entry: no inode, no head; a changed version is a change in place
        return True
    if not taken.same_object(stat) or taken.size == 0:
        return False
    if taken.head is None:
        return True
    return head_of(path, head_length(taken.head)) == taken.head
