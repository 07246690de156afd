"""Saving and restoring a checkpoint without gathering its tables in one process.

`save` writes the small values whole and each table a chunk of rows at a time, read on its own ps by row (a gather: a
ps never copies its shard whole, as TensorFlow does with a shard read whole once sparse updates touched it), and
written by the chief, or with `rows_on_ps` by the ps holding it (every ps at once, a chunk at a time each); `restore`
reads each table a chunk at a time and scatters it into the variables on their ps, whatever shards they are split into
now. The bundle is an ordinary TensorFlow checkpoint (the same keys as `tf.train.Checkpoint.write`), and any such
checkpoint restores through here. The process running them holds at most a chunk of any table (a table's rows and its
slots, read together), or one small value (under a quarter of a chunk).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import tensorflow as tf
from tensorflow.python.eager import context

from tables.streaming.bundle import BundleReader, BundleWriter, remove_bundle
from tables.streaming.entries import GRAPH_KEY, saved
from tables.streaming.per_ps import on_each_ps
from tables.streaming.rows import CHUNK_BYTES, RowGroup


class CheckpointMismatch(ValueError):
    """A checkpoint lacks a key of the live objects, or holds it with another shape."""


def save(root, prefix: str, *, device: str | None = None, chunk_bytes: int = CHUNK_BYTES,
         tables: Callable[[str], bool] | None = None, rows_on_ps: bool = False) -> str:
    """Writes `root` (a tf.train.Checkpoint) as the bundle `prefix`; returns `prefix`. With `tables`, only the
    tables whose key it accepts (e.g. not optimizer slots: a checkpoint to serve from, never to resume). With
    `rows_on_ps` (every ps reaches `prefix`'s folder at the same path) each ps writes its own tables' rows."""
    entries = saved(root, chunk_bytes=chunk_bytes, tables=tables)
    writer = BundleWriter(prefix, device=device)
    try:
        writer.add(GRAPH_KEY, tf.constant(entries.graph))
        small = entries.small + [entry for streamed in entries.streamed for entry in streamed.small]
        for entry in small:
            value = entry.read()
            if value is not None:  # an uninitialised variable saves nothing, as TensorFlow's own save
                writer.add(entry.key, value, entry.spec)
        groups = entries.groups + [group for streamed in entries.streamed for group in streamed.groups]
        chunks = _chunks(groups, chunk_bytes)
        for chunk in chunks if not rows_on_ps else [chunk for chunk in chunks if not chunk[0].device]:
            _write_chunk(writer, chunk, None)
        if rows_on_ps:  # every ps at once, a chunk at a time each
            on_each_ps([chunk for chunk in chunks if chunk[0].device], lambda chunk: chunk[0].device,
                       lambda chunk: _write_chunk(writer, chunk, chunk[0].device))
        return writer.finish()
    except BaseException:
        writer.abandon()
        raise


def _write_chunk(writer: BundleWriter, chunk: tuple[RowGroup, int, int], device: str | None) -> None:
    """Rows [begin, end) of the group, written by `device` (its ps; None: the writer's own device). A ps's part is
    waited for: a row read there after it comes back only once it is written, as a task runs what the chief sends
    it in order, and a part that failed fails it (not context.async_wait, which syncs every task, workers too)."""
    group, begin, end = chunk
    for piece, values in zip(group.slices, group.read(begin, end), strict=True):
        writer.add(piece.key, values, piece.spec(begin, end), device=device)
    if device:
        group.read(0, 1)[0].numpy()


def _writer_of(group: RowGroup, rows_on_ps: bool) -> str | None:
    """The ps that writes and reads `group`'s rows itself (training.output_dir_shared), or None: the chief does."""
    return group.device if rows_on_ps else None


def _chunks(groups: list[RowGroup], chunk_bytes: int) -> list[tuple[RowGroup, int, int]]:
    return [(group, begin, end) for group in groups for begin, end in group.ranges(chunk_bytes)]


def restore(root, prefix: str, *, device: str | None = None, chunk_bytes: int = CHUNK_BYTES,
            rows_on_ps: bool = False) -> None:
    """Restores every value of `root` from the checkpoint `prefix`; a key it lacks, or holds with another shape,
    raises CheckpointMismatch naming it (nothing of the model is left at its initial value unnoticed). With
    `rows_on_ps` each ps reads its own tables' rows from the shared folder."""
    entries = saved(root, chunk_bytes=chunk_bytes)
    reader = BundleReader(prefix, device=device)
    _check_keys(reader, entries)
    for entry in entries.small:
        entry.restore(reader.whole(entry.key) if entry.rows is None
                      else reader.rows(entry.key, entry.rows[0], sum(entry.rows)))
    chunks = _chunks(entries.groups, chunk_bytes)
    for chunk in chunks if not rows_on_ps else [chunk for chunk in chunks if not chunk[0].device]:
        _restore_chunk(reader, chunk, None)
    if rows_on_ps:  # every ps at once, a chunk at a time each
        on_each_ps([chunk for chunk in chunks if chunk[0].device], lambda chunk: chunk[0].device,
                   lambda chunk: _restore_chunk(reader, chunk, chunk[0].device))
    for streamed in entries.streamed:
        streamed.owner.restore_streamed(reader, streamed.prefix, chunk_bytes)


def _restore_chunk(reader: BundleReader, chunk: tuple[RowGroup, int, int], device: str | None) -> None:
    """Rows [begin, end) of the group from `reader`, read by `device` (its ps; None: the reader's own device)."""
    group, begin, end = chunk
    group.write(begin, end, [reader.rows(piece.key, piece.offset + begin, piece.offset + end, device=device)
                             for piece in group.slices])
    if device:  # waited on its ps alone, as a save's part
        group.read(0, 1)[0].numpy()
    else:
        context.async_wait()  # remote writes are queued: without a wait, many chunks wait on the ps at once


def _check_keys(reader: BundleReader, entries) -> None:
    wanted = {entry.key: entry.full_shape for entry in entries.small}
    wanted.update({piece.key: piece.full_shape for group in entries.groups for piece in group.slices})
    missing = sorted(key for key in wanted if not reader.has(key))
    if missing:
        raise CheckpointMismatch(f"{reader.prefix} lacks {len(missing)} value{'s' * (len(missing) != 1)} of the "
                                 f"model, e.g. {missing[0]}")
    for key, shape in wanted.items():
        if shape is not None and list(shape) != list(reader.shapes[key]):
            raise CheckpointMismatch(f"{reader.prefix} holds {key} with shape {reader.shapes[key]}, the model "
                                     f"{list(shape)}")


def warm_up(root, directory: Path, *, device: str | None = None, chunk_bytes: int = CHUNK_BYTES,
            rows_on_ps: bool = False) -> None:
    """Runs every op a save and a restore of `root` run, once, on a row of each table and each small value, into a
    bundle under `directory` that is then removed. In a cluster, an op the chief has not run yet waits for every
    task to register it, a stopped worker included; a chief that warmed up saves past a frozen worker."""
    entries = saved(root, chunk_bytes=chunk_bytes)
    prefix = str(directory / ".warm-up")
    writer = BundleWriter(prefix, device=device)
    try:
        for entry in entries.small + [entry for streamed in entries.streamed for entry in streamed.small]:
            value = entry.read()
            if value is not None:
                writer.add(entry.key, value, entry.spec)
        groups = entries.groups + [group for streamed in entries.streamed for group in streamed.groups]
        for group in groups:
            if group.rows:
                _write_chunk(writer, (group, 0, 1), _writer_of(group, rows_on_ps))
        writer.finish()
        reader = BundleReader(prefix, device=device)
        for key, shape in reader.shapes.items():
            reader.rows(key, 0, 1) if shape else reader.whole(key)
        for group in groups if rows_on_ps else []:
            for piece in group.slices if group.rows and group.device else []:
                reader.rows(piece.key, piece.offset, piece.offset + 1, device=group.device)
    finally:
        writer.abandon()
        remove_bundle(prefix)
