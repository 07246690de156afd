"""Whether a data file is whole, read from its bytes (pure Python): a file still being written is not trained.

Each check returns None for a whole file, or what is missing. A plain text file must end with a newline (a
writer stopped mid-line is not done); a gzip file must hold complete gzip streams to its last byte (a cut
stream has no end marker; bytes that do not inflate make it unreadable); a TFRecord file must be whole records
to its last byte (each record's length field leads exactly to the next). These are checked once the file's size
and time stood still for `settle_s` (see online/follow/landing.py), so a writer that pauses at a line or
record boundary is not taken for done; a Verdict says what the follow loop does with the file.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from pathlib import Path

READ_BYTES = 1 << 20
WHOLE, UNFINISHED, UNREADABLE = "whole", "unfinished", "unreadable"
NOT_GZIP = "is not a whole gzip stream"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What a file's bytes say once it stood still: WHOLE (train it), UNFINISHED (not whole yet: waits, then
    taken as it is) or UNREADABLE (quarantined whole, never read by a worker), and why."""

    kind: str
    why: str = ""


def verdict_of(missing: str | None) -> Verdict:
    """A check's answer as a Verdict: None is whole; a gzip stream that does not inflate is unreadable."""
    if missing is None:
        return Verdict(WHOLE)
    return Verdict(UNREADABLE if missing.startswith(NOT_GZIP) else UNFINISHED, missing)


def text_missing(path: Path) -> str | None:
    """A plain text file is whole when it is empty or its last byte ends a line."""
    with open(path, "rb") as handle:
        handle.seek(0, 2)
        if handle.tell() == 0:
            return None
        handle.seek(-1, 2)
        return None if handle.read(1) == b"\n" else "its last line has no newline yet (still being written?)"


def gzip_missing(path: Path) -> str | None:
    """A gzip file is whole when its streams (one or more, as `cat a.gz b.gz` makes) each reach their end marker
    and nothing follows the last; this reads the file once (about the speed of gunzip)."""
    inflate = zlib.decompressobj(wbits=31)
    with open(path, "rb") as handle:
        while chunk := handle.read(READ_BYTES):
            while chunk:
                try:
                    inflate.decompress(chunk)
                except zlib.error as error:
                    return f"{NOT_GZIP} ({error})"
                chunk = inflate.unused_data
                if inflate.eof and chunk:
                    inflate = zlib.decompressobj(wbits=31)  # the next stream of a multi-stream file
    return None if inflate.eof else "its gzip stream has no end yet (still being written?)"


def tfrecord_missing(path: Path) -> str | None:
    """A TFRecord file is whole when its records' length fields lead exactly to its last byte."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        while handle.tell() < size:
            header = handle.read(8)
            if len(header) < 8:
                return "ends inside a record header (still being written?)"
            end = handle.tell() + 4 + struct.unpack("<Q", header)[0] + 4
            if end > size:
                return "ends inside a record (still being written?)"
            handle.seek(end)
    return None

