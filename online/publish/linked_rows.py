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

from tables.streaming.bundle_index import BundleIndex, slice_prefix, tensor_of

LINKED = "linked"


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
        owners, shards = _owners(index), {}
        for saved, key in sorted(self.keys.items()):
            self._take(saved, key.encode(), index, owners, shards)
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

    def _take(self, saved: str, key: bytes, index: BundleIndex, owners: dict, shards: dict[int, int]) -> None:
        """Takes checkpoint key `key`'s entries as `saved`'s, numbering their data files in `shards`, unless a file
        of theirs holds another tensor's bytes too."""
        own = index.pieces(key)
        ids = {entry.shard_id for entry in own.values() if _holds_bytes(entry)}
        if any(owners[shard] - {key, slice_prefix(key)} for shard in ids):
            return
        for shard in sorted(ids):
            shards.setdefault(shard, len(shards))
        for name, entry in own.items():
            copy = type(entry)()
            copy.CopyFrom(entry)
            if _holds_bytes(copy):
                copy.shard_id = shards[entry.shard_id]
            self.entries[_renamed(name, key, saved.encode())] = copy
            self.bytes += entry.size
        self.linked.add(saved)

    def abandon(self) -> None:
        for path in self.files:
            path.unlink(missing_ok=True)
        self.files, self.entries, self.linked, self.bytes = [], {}, set(), 0

    def merge_into(self, prefix: str) -> None:
        """Makes the bundle at `prefix` (the small values, already written) hold the linked rows too: its data files
        are renumbered, the linked ones follow them, and its index, written last, names them all."""
        if not self.entries:
            return  # nothing linked: the bundle stays as TensorFlow wrote it
        index = BundleIndex.read(prefix)
        small = index.header.num_shards
        total = small + len(self.files)
        for number in range(small):
            os.rename(f"{prefix}.data-{number:05d}-of-{small:05d}", f"{prefix}.data-{number:05d}-of-{total:05d}")
        for number, path in enumerate(self.files):
            os.rename(path, f"{prefix}.data-{small + number:05d}-of-{total:05d}")
        for name, entry in self.entries.items():
            if _holds_bytes(entry):
                entry.shard_id += small
            index.entries[name] = entry
        index.header.num_shards = total
        index.write(prefix)
        self.files = []


def _owners(index: BundleIndex) -> dict[int, set[bytes]]:
    """The tensor names each data file holds bytes of."""
    owners: dict[int, set[bytes]] = {}
    for name, entry in index.entries.items():
        if _holds_bytes(entry):
            owners.setdefault(entry.shard_id, set()).add(tensor_of(name))
    return owners


def _holds_bytes(entry) -> bool:
    """Whether an entry's values are in a data file: a whole tensor's or a slice's (not a sliced tensor's list)."""
    return bool(entry.size or not entry.slices)


def _renamed(name: bytes, old: bytes, new: bytes) -> bytes:
    return new if name == old else slice_prefix(new) + name[len(slice_prefix(old)):]
