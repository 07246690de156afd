"""A checkpoint bundle's index (`prefix.index`, TensorFlow's sorted table of one BundleEntryProto per key) read and
written in Python, so a bundle can be made of another's data files without reading them (publish/linked_rows.py).

The table format is TensorFlow's (tsl/lib/io: blocks of prefix-compressed entries with restart points, each block
followed by its type byte and masked CRC-32C, then the metaindex and index blocks and a 48-byte footer). A written
index has one data block whose every entry is a restart point; TensorFlow's own readers read it (tested), and its
checksums are TensorFlow's.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from tensorflow.core.protobuf import tensor_bundle_pb2

MAGIC = 0xDB4775248B80FB57
FOOTER_BYTES = 48
HEADER_KEY = b""
ESCAPES = {0: b"\x00\xff", 255: b"\xff\x00"}  # how OrderedCode writes bytes 0 and 255 inside a string
_CRC_TABLE = []
for _byte in range(256):
    _crc = _byte
    for _ in range(8):
        _crc = (_crc >> 1) ^ 0x82F63B78 if _crc & 1 else _crc >> 1
    _CRC_TABLE.append(_crc)


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of `data`, as TensorFlow's tables check blocks with."""
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


class BundleIndex:
    """The header and the entries, by key, of one bundle's index."""

    def __init__(self, header, entries: dict):
        self.header, self.entries = header, entries  # a BundleHeaderProto; BundleEntryProtos by key

    @classmethod
    def read(cls, prefix: str) -> BundleIndex:
        data = Path(prefix + ".index").read_bytes()
        header, entries = None, {}
        for key, value in _table_entries(data):
            if key == HEADER_KEY:
                header = tensor_bundle_pb2.BundleHeaderProto.FromString(value)
            else:
                entries[key] = tensor_bundle_pb2.BundleEntryProto.FromString(value)
        if header is None:
            raise ValueError(f"{prefix}.index has no bundle header: not a TensorFlow checkpoint bundle")
        return cls(header, entries)

    def pieces(self, key: bytes) -> dict:
        """The entries of tensor `key`: its own and, when it was saved as slices, each slice's."""
        prefix = slice_prefix(key)
        return {name: entry for name, entry in self.entries.items() if name == key or name.startswith(prefix)}

    def write(self, prefix: str) -> None:
        """Writes `prefix.index` (flushed to disk) from the header and entries, keys in byte order."""
        rows = [(HEADER_KEY, self.header.SerializeToString())]
        rows += [(key, self.entries[key].SerializeToString()) for key in sorted(self.entries)]
        path = Path(prefix + ".index")
        with open(path, "wb") as file:
            file.write(_table(rows))
            file.flush()
            os.fsync(file.fileno())


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _block(rows: list[tuple[bytes, bytes]]) -> bytes:
    """A block of `rows`, each a restart point (no key shares a prefix with the one before)."""
    out, restarts = bytearray(), []
    for key, value in rows:
        restarts.append(len(out))
        out += _varint(0) + _varint(len(key)) + _varint(len(value)) + key + value
    restarts = restarts or [0]
    out += b"".join(struct.pack("<I", at) for at in restarts) + struct.pack("<I", len(restarts))
    return bytes(out)


def _table(rows: list[tuple[bytes, bytes]]) -> bytes:
    """A whole table file of `rows` (sorted by key): one data block, an empty metaindex, the index, the footer."""
    out = bytearray()

    def put(block: bytes) -> bytes:
        handle = _varint(len(out)) + _varint(len(block))
        trailer = b"\x00"  # no compression
        out.extend(block + trailer + struct.pack("<I", masked(crc32c(block + trailer))))
        return handle

    data = put(_block(rows))
    metaindex = put(_block([]))
    index = put(_block([(rows[-1][0] + b"\x00", data)]))
    footer = (metaindex + index).ljust(FOOTER_BYTES - 8, b"\x00") + struct.pack("<Q", MAGIC)
    return bytes(out + footer)


def _table_entries(data: bytes):
    """The (key, value) rows of a table file's data blocks, in order."""
    if len(data) < FOOTER_BYTES or struct.unpack("<Q", data[-8:])[0] != MAGIC:
        raise ValueError("not a TensorFlow table: its footer has no table magic")
    footer = data[-FOOTER_BYTES:]
    _, at = _read_varint(footer, 0)
    _, at = _read_varint(footer, at)
    index_offset, at = _read_varint(footer, at)
    index_size, _ = _read_varint(footer, at)
    for _, handle in _block_rows(_block_at(data, index_offset, index_size)):
        offset, at = _read_varint(handle, 0)
        size, _ = _read_varint(handle, at)
        yield from _block_rows(_block_at(data, offset, size))


def _block_at(data: bytes, offset: int, size: int) -> bytes:
    block, kind = data[offset:offset + size], data[offset + size]
    if kind != 0:
        raise ValueError(f"a table block compressed with kind {kind}: only uncompressed blocks are read here")
    stored = struct.unpack("<I", data[offset + size + 1:offset + size + 5])[0]
    if masked(crc32c(data[offset:offset + size + 1])) != stored:
        raise ValueError("a table block's checksum does not match: the index is damaged")
    return block


def _block_rows(block: bytes):
    restarts = struct.unpack("<I", block[-4:])[0]
    end, at, key = len(block) - 4 - 4 * restarts, 0, b""
    while at < end:
        shared, at = _read_varint(block, at)
        unshared, at = _read_varint(block, at)
        size, at = _read_varint(block, at)
        key = key[:shared] + block[at:at + unshared]
        at += unshared
        yield key, block[at:at + size]
        at += size


def slice_prefix(name: bytes) -> bytes:
    """How the key of every slice of tensor `name` begins (EncodeTensorNameSlice: 0, then the name as OrderedCode
    writes a string)."""
    return b"\x00" + b"".join(ESCAPES.get(byte, bytes([byte])) for byte in name) + b"\x00\x01"


def tensor_of(name: bytes) -> bytes:
    """The tensor an entry's key is of, as the key writes it: the key itself, or a slice key's escaped name."""
    return name[:name.index(b"\x00\x01", 1) + 2] if name.startswith(b"\x00") else name


def slice_rows(name: bytes) -> tuple[int, int] | None:
    """The rows [begin, end) a slice's key (TensorFlow's EncodeTensorNameSlice) covers, its other dimensions whole;
    None for a key that is no slice's, or a slice cut in another dimension too (end -1: to the last row)."""
    if not name.startswith(b"\x00"):
        return None
    at = name.index(b"\x00\x01", 1) + 2
    width = name[at]
    rank, at = int.from_bytes(name[at + 1:at + 1 + width], "big"), at + 1 + width
    extents = []
    for _ in range(2 * rank):
        value, at = _signed(name, at)
        extents.append(value)
    if rank == 0 or any((start, length) != (0, -1) for start, length in zip(extents[2::2], extents[3::2], strict=True)):
        return None
    start, length = extents[0], extents[1]
    return start, -1 if length == -1 else start + length


def _signed(data: bytes, at: int) -> tuple[int, int]:
    """A number as OrderedCode's WriteSignedNumIncreasing wrote it at `at`, and where the next begins: its length
    is the count of leading bits equal to the first (ones for a positive number, zeros for a negative one)."""
    negative = data[at] < 0x80
    two = (data[at] << 8) | (data[at + 1] if at + 1 < len(data) else 0)
    two = two ^ 0xFFFF if negative else two
    length = 16 - (~two & 0xFFFF).bit_length()  # the leading ones
    value = int.from_bytes(data[at:at + length], "big")
    if negative:
        value ^= (1 << 8 * length) - 1
    magnitude = value & ((1 << (8 * length - length - 1)) - 1)
    return (~magnitude if negative else magnitude), at + length
