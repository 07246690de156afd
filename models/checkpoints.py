"""Checkpoints on the chief's disk, at epoch ends and within epochs: the coordinator resumes from them and the
evaluator reads them.

One series (model and optimizer) serves both needs: `ckpt-<E>` after epoch E, `ckpt-<E>-<S>` after S steps of
epoch E + 1 (written every `checkpoint_every_s` and when the chief is asked to stop). The retention rule agreed with the
evaluator: the newest `keep` checkpoints stay; an older one is deleted once the evaluator has listed it in
`evaluated.json` beside them (or when the cluster has no evaluator), or when more than `keep_unevaluated` older
ones wait for it (the oldest go: the evaluator, which scores only the newest `keep_unevaluated` it has not done,
never reads them). One a serving version is being written from stays until a save after that version is done. What
a save that died midway left is removed when the chief next opens the directory.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import NamedTuple

import tensorflow as tf

from cluster.run_files import EvaluationState, RunFiles
from common.errors import Problem, UserError
from tables.streaming import checkpoint_io
from tables.streaming.entries import SLOT
from tables.streaming.rows import CHUNK_BYTES

PREFIX = "ckpt-"


class Position(NamedTuple):
    """Where training stands: `epochs` complete, then `steps` of the next epoch."""

    epochs: int
    steps: int = 0

    @property
    def name(self) -> str:
        return f"{PREFIX}{self.epochs}" + (f"-{self.steps}" if self.steps else "")

    def __str__(self) -> str:
        return f"within epoch {self.epochs + 1} at step {self.steps}" if self.steps else f"after epoch {self.epochs}"


def checkpoint_position(path: str) -> Position:
    """The position a `.../ckpt-<E>` or `.../ckpt-<E>-<S>` prefix holds."""
    match = re.search(rf"{PREFIX}(\d+)(?:-(\d+))?$", path)
    if not match:
        raise ValueError(f"not a checkpoint prefix: {path}")
    return Position(int(match.group(1)), int(match.group(2) or 0))


def checkpoint_epoch(path: str) -> int:
    """The epochs complete in a checkpoint (a checkpoint within an epoch counts the epochs before it)."""
    return checkpoint_position(path).epochs


def checkpoint_step(path: str) -> int:
    """The optimizer step stored in a checkpoint (the step its TensorBoard points belong at)."""
    for key, _ in tf.train.list_variables(path):
        if key.startswith("optimizer/") and re.search(r"/_?iter(ations)?/\.ATTRIBUTES/VARIABLE_VALUE$", key):
            return int(tf.train.load_variable(path, key))
    raise ValueError(f"{path} holds no optimizer step")


def stored_text(path: str, name: str) -> str | None:
    """The string variable a checkpoint saved as object `name` (an `extra` of EpochCheckpoints), or None."""
    key = f"{name}/.ATTRIBUTES/VARIABLE_VALUE"
    if key not in dict(tf.train.list_variables(path)):
        return None
    value = tf.train.load_variable(path, key)
    return value.decode() if isinstance(value, bytes) else str(value)


def listed_checkpoints(directory: Path) -> list[str]:
    """Complete checkpoints in save order, as named by the `checkpoint` state file (written after the data)."""
    state = tf.train.get_checkpoint_state(str(directory))
    return list(state.all_model_checkpoint_paths) if state else []


def leftovers(directory: Path) -> list[Path]:
    """What saves that died midway left in `directory` (a full disk, a kill): `<name>_temp/` folders of shards never
    merged, and the files of checkpoints newer than the newest the state file lists (never recorded). Removed when
    the chief opens the directory, before it writes: they would fill the disk the next save needs."""
    found = list(directory.glob(f"{PREFIX}*_temp"))
    listed = listed_checkpoints(directory)
    if not listed:
        return found  # no state file to tell a recorded checkpoint from another: the rest stays
    newest = checkpoint_position(listed[-1])
    for path in directory.glob(f"{PREFIX}*.*"):
        try:
            position = checkpoint_position(path.name.split(".", 1)[0])
        except ValueError:
            continue
        if position > newest and path.is_file():
            found.append(path)
    return found


def not_a_slot(key: str) -> bool:
    """Whether checkpoint key `key` is not an optimizer's slot: neither a TF1-style optimizer's (the tables' own,
    under the variable) nor one of the Keras optimizer's variables (saved under `optimizer/`, as named here)."""
    return SLOT not in key and not key.startswith("optimizer/")


class EpochCheckpoints:
    """Writes, lists, restores and prunes checkpoints; with `io_device` (ParameterServerStrategy: the chief's CPU)
    through that device a chunk of rows at a time (tables/streaming/), or with `rows_on_ps` each ps writing its own
    rows, so no process holds a whole table; without it (the synchronous strategies) with TensorFlow's own save."""

    def __init__(self, files: RunFiles, *, model, optimizer, keep: int, has_evaluator: bool, io_device: str | None,
                 scratch: Path | None = None, extra: dict | None = None, chunk_bytes: int = CHUNK_BYTES,
                 keep_unevaluated: int = 10, rows_on_ps: bool = False):
        """`scratch`: a worker that is not the lead (multi_worker_mirrored) writes there, as every worker must
        take part in a save, and removes what it wrote; it reads the lead's checkpoints. `extra`: more objects
        saved beside the model (follow mode: where the data stands). `chunk_bytes`: the most of a table held at a
        time by a streamed save or restore. `rows_on_ps`: each ps writes its tables' rows of a streamed save and
        reads them back in a restore (every ps reaches the folder at the same path: coordinator/shared_output.py)."""
        self.files, self.directory, self.scratch = files, files.checkpoints, scratch
        directory = self.directory
        self.keep, self.keep_unevaluated = keep, keep_unevaluated
        self.has_evaluator, self.io_device, self.chunk_bytes = has_evaluator, io_device, chunk_bytes
        self.rows_on_ps = rows_on_ps
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, **(extra or {}))
        if scratch is None:
            directory.mkdir(parents=True, exist_ok=True)
            for leftover in leftovers(directory):
                if leftover.is_dir():
                    shutil.rmtree(leftover)
                else:
                    leftover.unlink()

    def latest_path(self) -> str | None:
        paths = listed_checkpoints(self.directory)
        return paths[-1] if paths else None

    def restore_latest(self) -> Position:
        """Restores the newest checkpoint, if any, and returns where training stood when it was written."""
        paths = listed_checkpoints(self.directory)
        if self.io_device is not None:  # every op of a save run once now, while every task answers
            checkpoint_io.warm_up(self.checkpoint, self.directory, device=self.io_device, chunk_bytes=self.chunk_bytes,
                                  rows_on_ps=self.rows_on_ps)
        if not paths:
            return Position(0)
        if self.io_device is None:
            self.checkpoint.read(paths[-1]).assert_existing_objects_matched()
        else:
            try:
                checkpoint_io.restore(self.checkpoint, paths[-1], device=self.io_device,
                                      chunk_bytes=self.chunk_bytes, rows_on_ps=self.rows_on_ps)
            except checkpoint_io.CheckpointMismatch as error:
                raise UserError(Problem("training.output_dir", str(self.directory), f"holds a checkpoint of another "
                                        f"model ({error})", "use a new output_dir, or `sh run.sh --fresh` to move the "
                                        "old run aside")) from None
        return checkpoint_position(paths[-1])

    def save(self, position: Position, *, reading: Collection[str] = ()) -> str:
        """Writes the checkpoint of `position` and prunes older ones, sparing those in `reading` (an exporter reads
        them now: the next save prunes them)."""
        if self.scratch is not None:
            prefix = self.checkpoint.write(str(self.scratch / position.name))
            tf.io.gfile.rmtree(str(self.scratch))
            return prefix
        prefix = self.write_aside(str(self.directory / position.name))
        paths = [p for p in listed_checkpoints(self.directory) if checkpoint_position(p) < position] + [prefix]
        self._record(self._prune(paths, reading=set(reading)))
        return prefix

    def write_aside(self, prefix: str, *, table_slots: bool = True) -> str:
        """Writes a checkpoint to `prefix`, outside the series: never listed, restored or pruned here. Without
        `table_slots` (one to serve from) a streamed save leaves out the tables' optimizer slots (a dynamic
        table's, saved with its rows, stay)."""
        if self.io_device is None:
            return self.checkpoint.write(prefix)
        return checkpoint_io.save(self.checkpoint, prefix, device=self.io_device, chunk_bytes=self.chunk_bytes,
                                  tables=None if table_slots else not_a_slot, rows_on_ps=self.rows_on_ps)

    def _prune(self, paths: list[str], *, reading: set[str]) -> list[str]:
        evaluated = set(EvaluationState.load(self.files).evaluated)
        old = paths[:max(0, len(paths) - self.keep)]
        waiting = [path for path in old if self.has_evaluator and Path(path).name not in evaluated]
        spared = set(waiting[-self.keep_unevaluated:]) | reading  # the newest the evaluator has not done
        kept = []
        for path in paths:
            if path in old and path not in spared:
                for file in tf.io.gfile.glob(path + ".*"):
                    tf.io.gfile.remove(file)
            else:
                kept.append(path)
        return kept

    def _record(self, paths: list[str]) -> None:
        tf.compat.v1.train.update_checkpoint_state(str(self.directory), Path(paths[-1]).name,
                                                   [Path(p).name for p in paths])
