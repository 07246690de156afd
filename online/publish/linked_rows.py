"""A version's table rows taken from its checkpoint's data files by hard links, not copied: the rows are on disk
once, as whoever wrote the checkpoint wrote them (each ps, with `output_dir_shared`), and the exporter writes only
the small values and an index that names the checkpoint's data files under the version's keys.

A checkpoint written by BundleWriter holds each saved piece (a table's chunk) in a data file of its own, so a
table's files hold its rows and nothing else; a table whose files hold anything more (a bundle another writer
merged), or a folder where a hard link cannot be made (another filesystem), is copied as before.
"""

from __future__ import annotations

import os
from pathlib import Path

from tables.streaming.bundle_index import BundleIndex

LINKED = "linked"
ESCAPES = {0: b"\x00\xff", 255: b"\xff\x00"}


def _escaped(name: bytes) -> bytes:
    """A name as TensorFlow's OrderedCode writes a string inside a slice's key (bytes 0 and 255 escaped)."""
    return b"".join(ESCAPES.get(byte, bytes([byte])) for byte in name)


def _slice_prefix(name: bytes) -> bytes:
    return b"\x00" + _escaped(name) + b"\x00\x01"


class LinkedRows:
    """Tables linked into a version's variables folder from a checkpoint: `keys` maps each saved key to its
    checkpoint key; after `link`, `linked` holds the saved keys whose rows are linked (the rest are to be copied)."""

    def __init__(self, checkpoint: str, keys: dict[str, str], folder: Path):
        self.checkpoint, self.keys, self.folder = checkpoint, keys, folder
        self.entries: dict[bytes, object] = {}
        self.files: list[Path] = []
        self.linked: set[str] = set()
        self.bytes = 0

    def link(self) -> str | None:
        """Links the rows it can; returns why none were linked (None when they were, or nothing asked it)."""
        if not self.keys:
            return None
        index = BundleIndex.read(self.checkpoint)
        owners = _owners(index)
        shards: dict[int, int] = {}
        for saved, key in sorted(self.keys.items()):
            own = _entries_of(index, key.encode())
            ids = {entry.shard_id for name, entry in own.items() if entry.size or not entry.slices}
            if any(owners[shard] - {key.encode(), _slice_prefix(key.encode())} for shard in ids):
                continue  # a data file shared with other keys: copied
            for shard in sorted(ids):
                shards.setdefault(shard, len(shards))
            for name, entry in own.items():
                renamed = _renamed(name, key.encode(), saved.encode())
                copy = type(entry)()
                copy.CopyFrom(entry)
                if copy.size or not copy.slices:
                    copy.shard_id = shards[entry.shard_id]
                self.entries[renamed] = copy
                self.bytes += entry.size
            self.linked.add(saved)
        try:
            for shard, number in shards.items():
                source = Path(f"{self.checkpoint}.data-{shard:05d}-of-{index.header.num_shards:05d}")
                target = self.folder / f"{LINKED}.{number:05d}"
                os.link(source, target)
                self.files.append(target)
        except OSError as error:
            self.abandon()
            return f"no hard link from {Path(self.checkpoint).parent} to {self.folder}: {error.strerror}"
        return None

    def abandon(self) -> None:
        for path in self.files:
            path.unlink(missing_ok=True)
        self.files, self.entries, self.linked, self.bytes = [], {}, set(), 0

    def merge_into(self, prefix: str) -> None:
        """Makes the bundle at `prefix` (the small values, already written) hold the linked rows too: its data files
        are renumbered, the linked ones follow them, and its index, written last, names them all."""
        index = BundleIndex.read(prefix)
        small = index.header.num_shards
        total = small + len(self.files)
        for number in range(small):
            os.rename(f"{prefix}.data-{number:05d}-of-{small:05d}", f"{prefix}.data-{number:05d}-of-{total:05d}")
        for number, path in enumerate(self.files):
            os.rename(path, f"{prefix}.data-{small + number:05d}-of-{total:05d}")
        for name, entry in self.entries.items():
            if entry.size or not entry.slices:
                entry.shard_id += small
            index.entries[name] = entry
        index.header.num_shards = total
        index.write(prefix)
        self.files = []


def _owners(index: BundleIndex) -> dict[int, set[bytes]]:
    """The tensor names each data file holds bytes of."""
    owners: dict[int, set[bytes]] = {}
    for name, entry in index.entries.items():
        if entry.size or not entry.slices:
            owners.setdefault(entry.shard_id, set()).add(_tensor_of(name))
    return owners


def _tensor_of(name: bytes) -> bytes:
    """The tensor a key is of, as written in its key: itself, or the escaped name inside a slice's key."""
    return name[:name.index(b"\x00\x01", 1) + 2] if name.startswith(b"\x00") else name


def _entries_of(index: BundleIndex, key: bytes) -> dict:
    prefix = _slice_prefix(key)
    return {name: entry for name, entry in index.entries.items() if name == key or name.startswith(prefix)}


def _renamed(name: bytes, old: bytes, new: bytes) -> bytes:
    return new if name == old else _slice_prefix(new) + name[len(_slice_prefix(old)):]
