"""Whether a data file is whole, read from its bytes (pure Python): a file still being written is never trained.

Each check returns None for a whole file, or what is missing. A plain text file must end with a newline (a
writer stopped mid-line is not done); a gzip file must hold complete gzip streams to its last byte (a cut
stream has no end marker); a TFRecord file must be whole records to its last byte (each record's length field
leads exactly to the next). These are checked after the file's size and time stood still over one look at the
folder (see coordinator/follow/landing.py), so a writer that pauses at a line or record boundary is not taken for done.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

READ_BYTES = 1 << 20


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
                    return f"is not a whole gzip stream ({error})"
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

