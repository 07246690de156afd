"""Checkpoints kept for a lagging evaluator are capped (pure logic on a real checkpoints folder): the chief deletes
the oldest unread beyond `keep_unevaluated_checkpoints`, and the evaluator skips to the newest it may read, never
reaching for a deleted one, saying once what it skipped."""

from __future__ import annotations

import logging
import types
from pathlib import Path

import tensorflow as tf

from cluster.run_files import EvaluationState, RunFiles
from models.checkpoints import EpochCheckpoints, listed_checkpoints
from evaluator.loop import SidecarEvaluator


def chief(files: RunFiles, *, keep: int = 3, keep_unevaluated: int = 4) -> EpochCheckpoints:
    """An EpochCheckpoints with only what its retention rule reads (no model: nothing is written here)."""
    saving = EpochCheckpoints.__new__(EpochCheckpoints)
    saving.files, saving.directory, saving.keep, saving.keep_unevaluated = files, files.checkpoints, keep, \
        keep_unevaluated
    saving.has_evaluator = True
    return saving


def save(saving: EpochCheckpoints, number: int, reading: frozenset = frozenset()) -> None:
    """What a save leaves: the prefix's files, then the state file naming what the retention rule kept (sparing
    `reading`)."""
    prefix = saving.directory / f"ckpt-0-{number}"
    for suffix in (".index", ".data-00000-of-00001"):
        Path(str(prefix) + suffix).write_bytes(b"x")
    saving._record(saving._prune(listed_checkpoints(saving.directory) + [str(prefix)], reading=set(reading)))


def evaluator(files: RunFiles, window: int, log) -> SidecarEvaluator:
    """A SidecarEvaluator with only what choosing its checkpoints reads (no model)."""
    reading = SidecarEvaluator.__new__(SidecarEvaluator)
    reading.files, reading.checkpoint_dir, reading.log = files, files.checkpoints, log
    reading.training = types.SimpleNamespace(keep_unevaluated_checkpoints=window)
    reading.state, reading.waiting = EvaluationState.load(files), set()
    return reading


def names(paths) -> list[str]:
    return [Path(p).name for p in paths]


def test_a_lagging_evaluator_holds_at_most_the_cap_and_skips_to_the_newest(tmp_path, caplog):
    files = RunFiles(tmp_path)
    files.checkpoints.mkdir()
    saving, log = chief(files), logging.getLogger("evaluator-test")
    reading = evaluator(files, 4, log)
    for number in range(1, 4):
        save(saving, number)
    pending, newest = reading._pending()
    assert names(pending) == ["ckpt-0-1", "ckpt-0-2", "ckpt-0-3"] and Path(newest).name == "ckpt-0-3"
    reading.state.record("ckpt-0-1", {})  # it read one, then stalled while the chief went on
    reading.state.save()
    for number in range(4, 21):
        save(saving, number)
    on_disk = sorted({p.name.split(".")[0] for p in files.checkpoints.glob("ckpt-*")}, key=lambda n: int(n[7:]))
    assert on_disk == [f"ckpt-0-{n}" for n in range(14, 21)]  # the newest 3, and 4 older ones it has not read
    assert names(listed_checkpoints(files.checkpoints)) == on_disk
    with caplog.at_level(logging.WARNING, logger="evaluator-test"):
        pending, _ = reading._pending()
    assert names(pending) == [f"ckpt-0-{n}" for n in range(17, 21)]  # the newest 4: none the next save deletes
    assert [r.getMessage() for r in caplog.records if r.name == "evaluator-test"] == [
        "skipped 2 checkpoints, ckpt-0-2 to ckpt-0-3: deleted by the chief before they were read",
        "skipped 3 checkpoints, ckpt-0-14 to ckpt-0-16: the evaluator lags 7 checkpoints behind; it scores the "
        "newest 4 (training.keep_unevaluated_checkpoints)"]
    save(saving, 21)
    assert set(names(pending)) <= set(names(listed_checkpoints(files.checkpoints)))  # all still there to read
    assert EvaluationState.load(files).skipped["ckpt-0-2"] == "deleted by the chief before they were read"


def test_without_an_evaluator_only_the_newest_stay(tmp_path):
    files = RunFiles(tmp_path)
    files.checkpoints.mkdir()
    saving = chief(files)
    saving.has_evaluator = False
    for number in range(1, 8):
        save(saving, number)
    assert names(listed_checkpoints(files.checkpoints)) == ["ckpt-0-5", "ckpt-0-6", "ckpt-0-7"]
    assert len(list(files.checkpoints.glob("ckpt-*"))) == 6
    assert tf.train.latest_checkpoint(str(files.checkpoints)).endswith("ckpt-0-7")


def test_a_checkpoint_an_exporter_reads_is_spared_until_a_save_after_it_is_done(tmp_path):
    files = RunFiles(tmp_path)
    files.checkpoints.mkdir()
    saving = chief(files, keep=2)
    saving.has_evaluator = False
    save(saving, 1)
    read = str(files.checkpoints / "ckpt-0-1")
    for number in range(2, 6):
        save(saving, number, reading=frozenset({read}))
    assert names(listed_checkpoints(files.checkpoints)) == ["ckpt-0-1", "ckpt-0-4", "ckpt-0-5"]
    assert Path(read + ".index").exists()  # still there for the version being written from it
    save(saving, 6)  # the version is out
    assert names(listed_checkpoints(files.checkpoints)) == ["ckpt-0-5", "ckpt-0-6"]
    assert not Path(read + ".index").exists()
