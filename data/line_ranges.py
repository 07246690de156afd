"""Byte ranges of line-oriented files: cut at line starts on the chief, read in-graph by any worker without a scan.

A range [begin, end) always starts at a line start and ends at one (or at the end of the file), so ranges cut
from a file cover each of its lines exactly once: a cut point k * size / n moves forward to the first line that
begins at or after it. Finding it reads a few bytes near the point, so cutting a file of any size is cheap.
A worker reads only its ranges' bytes, in chunks (os.pread through a Python function every process registers),
rejoined into lines in-graph (a line may straddle two chunks).
"""

from __future__ import annotations

import dataclasses
import os

READER = "pscluster_read_byte_range"  # the token of the Python function that reads a chunk (see register_reader)
_REGISTERED: list = []
SCAN_BYTES = 1 << 16  # read at a time while looking for the next line start
CHUNK_BYTES = 1 << 20  # read at a time by a worker


@dataclasses.dataclass(frozen=True)
class ByteRange:
    """Bytes [begin, end) of the file at `path`, `size` bytes long; begin and end are line starts (or size)."""

    path: str
    begin: int
    end: int
    size: int

    @property
    def length(self) -> int:
        return self.end - self.begin


def line_start(path: str, offset: int, size: int) -> int:
    """The first line start at or after `offset` (`size` when no line begins there)."""
    if offset <= 0:
        return 0
    with open(path, "rb") as handle:
        handle.seek(offset - 1)  # a line starts at `offset` itself when the byte before it ends a line
        position = offset - 1
        while block := handle.read(SCAN_BYTES):
            found = block.find(b"\n")
            if found >= 0:
                return min(position + found + 1, size)
            position += len(block)
    return size


def split_at(whole: ByteRange, fraction: float) -> tuple[ByteRange, ByteRange]:
    """`whole` cut at the first line start at or after `fraction` of its bytes."""
    point = _aligned(whole, whole.begin + round(fraction * whole.length))
    return dataclasses.replace(whole, end=point), dataclasses.replace(whole, begin=point)


def _aligned(whole: ByteRange, offset: int) -> int:
    return max(whole.begin, min(whole.end, line_start(whole.path, offset, whole.size)))


def cut(ranges: tuple[ByteRange, ...], pieces: int) -> list[tuple[ByteRange, ...]]:
    """`ranges` cut into `pieces` runs of about equal bytes, in order: piece k holds the lines that begin in the
    k-th n-th of the bytes (some pieces are empty when there are fewer lines than pieces)."""
    total = sum(r.length for r in ranges)
    cuts = [total * k // pieces for k in range(1, pieces)]
    result: list[list[ByteRange]] = [[] for _ in range(pieces)]
    passed = 0
    for whole in ranges:
        piece = sum(1 for c in cuts if c < passed)
        inside = [_aligned(whole, whole.begin + c - passed) for c in cuts if passed <= c < passed + whole.length]
        edges = [whole.begin, *inside, whole.end]
        for offset, (begin, end) in enumerate(zip(edges, edges[1:], strict=False)):
            if end > begin:
                result[piece + offset].append(dataclasses.replace(whole, begin=begin, end=end))
        passed += whole.length
    return [tuple(p) for p in result]


def _pread(path, offset, length) -> bytes:
    with open(path.numpy(), "rb") as handle:
        return os.pread(handle.fileno(), int(length), int(offset))


def register_reader() -> None:
    """Makes READER callable by pipelines this process runs, even ones built in another process: an EagerPyFunc op
    names its Python function by token, and a dataset_fn traced on the chief runs on the workers (ParameterServer
    Strategy), so every process that runs pipelines (roles.server too) registers the reader under one fixed token."""
    import tensorflow as tf
    from tensorflow.python.ops import script_ops

    if script_ops._py_funcs.get(READER) is None:  # noqa: SLF001 - no public way to name a py_function
        _REGISTERED.append(script_ops.EagerFunc(_pread, [tf.string], False))
        script_ops._py_funcs._funcs[READER] = _REGISTERED[-1]  # noqa: SLF001 - weak values: _REGISTERED keeps it


def read_lines(path, begin, end, chunk_bytes: int = CHUNK_BYTES):
    """(where, byte offset, line) for each line of bytes [begin, end) of `path`, as a tf.data.Dataset; `where`
    is the path followed by " byte ", so where + offset names the line. Arguments may be tensors.

    tf.data has no reader that seeks: FixedLengthRecordDataset's header_bytes and Dataset.skip read through every
    byte before the range (seen with strace), so the chunks are read with os.pread through READER."""
    import tensorflow as tf

    register_reader()
    begin, end = tf.cast(begin, tf.int64), tf.cast(end, tf.int64)
    chunks = tf.data.Dataset.range(begin, end, chunk_bytes).map(
        lambda offset: tf.raw_ops.EagerPyFunc(input=[path, offset, tf.minimum(end - offset, chunk_bytes)],
                                              token=READER, Tout=[tf.string])[0])
    flagged = chunks.map(lambda text: (tf.reshape(text, []), False)).concatenate(
        tf.data.Dataset.from_tensors((tf.constant(""), True)))
    lines = flagged.scan((tf.constant(""), begin), _rejoin)
    where = tf.strings.join([path, " byte "])
    return lines.unbatch().map(lambda offset, line: (where, offset, line))


def _rejoin(state, element):
    """Scan step: the previous chunk's unfinished line + this chunk -> its whole lines and their offsets."""
    import tensorflow as tf

    leftover, offset = state
    text, last = element
    pieces = tf.strings.split(tf.strings.join([leftover, text]), "\n")
    starts = offset + tf.math.cumsum(tf.cast(tf.strings.length(pieces), tf.int64) + 1, exclusive=True)
    tail_is_line = tf.logical_and(last, tf.strings.length(pieces[-1]) > 0)  # a last line without a newline
    whole = tf.size(pieces) - 1 + tf.cast(tail_is_line, tf.int32)
    state = (tf.where(last, "", pieces[-1]), starts[-1])
    return state, (starts[:whole], pieces[:whole])
