"""What a follow-mode run keeps for weeks stays the size of a constant (pure logic, no TensorFlow run): the ledger,
the report's once-only lines, the stamp clocks' advances, the chain of deltas while versions keep failing and the
evaluator's evaluated.json, driven through 100,000 beats and 10,000 files, and each size as `status` shows it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import config as cluster_config
from cluster.run_files import NAMES_KEPT, EvaluationState, RunFiles
from clusterkit import cluster_document, write_cluster
from common.bounded import KEYS_KEPT, OnceKeys
from data.pieces import Piece
from launcher.status import run_progress
from models.checkpoints import checkpoint_position
from online.follow import deltas as follow_deltas
from online.follow.deltas import FollowDeltas, chain_cap
from online.follow.kept import kept_sizes, kept_text
from online.follow.landing import Landed
from online.follow.ledger import COMPACT_AFTER_S, Ledger
from online.publish.deltas import ADVANCES_KEPT, ClockAdvances, Written

BEATS, FILES = 100_000, 10_000
BEATS_PER_FILE = BEATS // FILES
FOLDER = 50  # files a retention job leaves in the folder
VERSION_EVERY = 600  # beats between serving versions (each one fails)
CHECKPOINT_EVERY = 10  # beats between checkpoints the evaluator scores
KEEP = 3  # checkpoints the chief keeps


def test_once_only_lines_keep_the_newest_keys_and_say_a_long_gone_one_at_most_once_more():
    said = OnceKeys()
    assert all(said.first(f"day_{n}\0not taken yet") for n in range(BEATS))
    assert len(said) == KEYS_KEPT
    assert not said.first(f"day_{BEATS - 1}\0not taken yet")  # a recent key: not said again
    assert said.first("day_0\0not taken yet") and not said.first("day_0\0not taken yet")  # pushed out: once more


def test_the_clocks_advances_keep_the_newest_and_an_older_step_gets_the_safe_watermark():
    advances = ClockAdvances()
    for beat in range(BEATS + ADVANCES_KEPT):
        advances.record(beat * 10, beat * 10 + 3)  # advanced to 10 k, the counter read 10 k + 3 once they were
        advances.record(beat * 10, beat * 10 + 3)  # an idle beat: the same advance, not kept twice
    assert len(advances) == ADVANCES_KEPT
    newest = (BEATS + ADVANCES_KEPT - 1) * 10
    assert advances.watermark_before(newest + 4) == newest  # the newest advance the counter had passed
    assert advances.watermark_before(newest) == newest - 10
    assert advances.watermark_before(10) == 0  # older than every kept advance: a delta reads every stamped row


def test_a_beat_that_hands_out_a_few_pieces_does_not_list_a_backlog_of_thousands():
    ledger = Ledger()
    for number in range(FILES):
        ledger.add(Landed(f"day_{number}", 100, 1.0, 1.0), [Piece(f"day_{number}", 0, 50), Piece(f"day_{number}",
                                                                                               50, 100)], 1.0)
    pieces = ledger.pending(set())
    assert isinstance(pieces, Iterator)  # made as they are taken: a beat looks at the first files, not all 10,000
    assert [next(pieces), next(pieces), next(pieces)] == [(0, 0), (0, 1), (1, 0)]
    assert sum(1 for _ in ledger.pending(set())) == 2 * FILES


class _Log:
    def __init__(self):
        self.lines: list[str] = []

    def info(self, message, *args):
        self.lines.append(message % args)

    warning = error = info


class _Source:
    """A DeltaSource's step counter and clock advances, without a model: the step moves one a beat."""

    def __init__(self):
        self.now, self.advances = 0, ClockAdvances()

    def step(self) -> int:
        return self.now

    def advance(self) -> int:
        self.advances.record(self.now, self.now)
        return self.now

    def watermark_before(self, step: int) -> int:
        return self.advances.watermark_before(step)


class _Files:
    """A DeltaFiles in memory: (version, sequence) of each delta on disk."""

    def __init__(self):
        self.on_disk: set[tuple[int, int]] = set()

    def of(self, version: int) -> list[int]:
        return sorted(sequence for number, sequence in self.on_disk if number == version)

    def drop_before(self, version: int) -> int:
        old = {item for item in self.on_disk if item[0] < version}
        self.on_disk -= old
        return len(old)

    def drop(self, version: int, sequences: list[int]) -> int:
        self.on_disk -= {(version, sequence) for sequence in sequences}
        return len(sequences)

    def version_folder(self, version: int) -> Path:  # none on disk: every delta is written, whatever its size
        return Path(f"/nonexistent/serving/{version}")


def _written(source, files, *, version, sequence, from_step, **_) -> Written:
    files.on_disk.add((version, sequence))
    return Written(Path(f"{version}.{sequence}"), version, sequence, from_step, source.now, {"t": 1}, 100, 0.0)


@pytest.fixture
def deltas(monkeypatch) -> FollowDeltas:
    """A follow run's deltas every beat, on a source without a model, chain_cap as versions every 600 s and deltas
    every 10 s give it."""
    monkeypatch.setattr(follow_deltas, "write_delta", _written)
    monkeypatch.setattr(follow_deltas.tf.train, "load_variable", lambda path, key: int(path.split("-")[-1]))
    return FollowDeltas(source=_Source(), files=_Files(), restore_moves_rows=False, clock_key="step", every_s=1e-9,
                        chunk_bytes=1, log=_Log(), cap=chain_cap(600.0, 10.0))


def _beat(ledger: Ledger, report: OnceKeys, beat: int) -> None:
    """A file lands every BEATS_PER_FILE beats (said once), trains at once, and a retention job deletes the file FOLDER
    files before it; the ledger compacts at each look."""
    if beat % BEATS_PER_FILE:
        return
    number, now = beat // BEATS_PER_FILE, float(beat)
    name = f"part-{number:05d}"
    report.first(f"{name}\0not taken yet")
    ledger.add(Landed(name, 100, now, now, dev=1, ino=number + 1, head="0:x"), [Piece(name, 0, 100)], now)
    ledger.finish((ledger.files[-1].seq, 0), 100, now, steps=1)
    if number >= FOLDER:
        ledger.gone(f"part-{number - FOLDER:05d}", now)
    ledger.serve(number, now, {name})  # a delta served it
    ledger.compact(now)


def _evaluate(state: EvaluationState, listed: list[str], beat: int) -> None:
    """A checkpoint every CHECKPOINT_EVERY beats, scored; the chief keeps the newest KEEP once they are scored."""
    if beat % CHECKPOINT_EVERY:
        return
    name = f"ckpt-0-{beat + 1}"
    listed.append(name)
    state.record(name, {"epoch": 0, "step": beat + 1, "metrics": {"val_auc": beat / BEATS}})
    state.best = state.best if beat > BEATS // 3 else name  # the best stops moving a third of the way in
    del listed[:-KEEP]
    state.fold(set(listed), checkpoint_position)


def test_a_follow_run_of_100000_beats_and_10000_files_keeps_each_structure_under_a_constant(deltas, tmp_path):
    """Versions keep failing all along: the deltas pause at their cap, said once, and the first version that lands
    starts a new chain and removes the old one."""
    ledger, report, listed = Ledger(), OnceKeys(), []
    state = EvaluationState(RunFiles(tmp_path).evaluated)
    largest: dict[str, int] = {}
    for beat in range(BEATS):
        deltas.source.now += 1  # training moves a step a beat
        _beat(ledger, report, beat)
        _evaluate(state, listed, beat)
        if beat == 0:
            deltas.based_on(1, "ckpt-0-0", 0)  # the first version lands
        elif beat % VERSION_EVERY == 0:  # a version's checkpoint is taken, and its export fails
            deltas.hold(ledger)
            deltas.from_step(f"ckpt-0-{deltas.source.now}")
            deltas.release()
        deltas.poll(ledger)
        sizes = {**kept_sizes(ledger=ledger, said=report, deltas=deltas), "evaluated_names": len(state.evaluated),
                 "results": len(state.results), "delta_files": len(deltas.files.on_disk),
                 "checkpoint_steps": len(deltas._checkpoint_steps)}
        largest = {key: max(value, largest.get(key, 0)) for key, value in sizes.items()}
    deltas.finish(ledger)
    assert ledger.done_count() == FILES and state.done_count() == BEATS // CHECKPOINT_EVERY
    assert largest["ledger_files"] <= FOLDER + COMPACT_AFTER_S / BEATS_PER_FILE + 1  # the folder, gone lately
    assert largest["once_lines"] <= KEYS_KEPT and largest["clock_advances"] <= ADVANCES_KEPT
    assert largest["delta_chain"] == largest["delta_files"] == deltas.cap == 240  # then paused
    assert largest["checkpoint_steps"] <= 1  # a failed version's checkpoint step goes with it
    assert largest["evaluated_names"] <= NAMES_KEPT + KEEP + 1 and largest["results"] <= NAMES_KEPT + KEEP + 1
    state.save()
    best = BEATS // 3 // CHECKPOINT_EVERY * CHECKPOINT_EVERY + 1  # kept, however old
    assert len(state.path.read_bytes()) < 40_000 and state.best == f"ckpt-0-{best}"
    assert EvaluationState.load(RunFiles(tmp_path)).results[state.best]["step"] == best
    paused = [line for line in deltas.log.lines if "deltas paused" in line]
    assert len(paused) == 1 and "version 1's chain holds 240 deltas" in paused[0], paused

    deltas.based_on(2, f"ckpt-0-{deltas.source.now}", deltas.source.now)  # a version lands at last
    deltas.source.now += 1
    deltas.poll(ledger)
    deltas.finish(ledger)
    assert deltas.files.on_disk == {(2, 1)} and deltas.sizes()["delta_chain"] == 1  # a new chain, the old one gone


def test_evaluated_json_folds_deleted_checkpoints_and_still_tells_one_deleted_unread(tmp_path, monkeypatch):
    """10,000 epochs, the chief keeping 3: evaluated.json stays a size, and no epoch it scored is called skipped
    (dropping names outright did that: ec41ae0), while one deleted before it was read still is."""
    from evaluator import loop

    evaluator = object.__new__(loop.SidecarEvaluator)
    evaluator.state, evaluator.waiting, evaluator.said_fold, evaluator.log = (
        EvaluationState(RunFiles(tmp_path).evaluated), set(), False, _Log())
    evaluator.training = type("Training", (), {"keep_unevaluated_checkpoints": 10})()
    evaluator.checkpoint_dir = tmp_path
    saves = []
    evaluator.state.save = lambda: saves.append(1)  # written at the end only: 10,000 writes wait on a busy disk
    listed: list[str] = []
    monkeypatch.setattr(loop, "listed_checkpoints", lambda directory: list(listed))
    for epoch in range(1, FILES + 1):
        if epoch != FILES // 2:  # deleted before the evaluator read it
            listed.append(f"ckpt-{epoch}")
        pending, _ = evaluator._pending()
        for path in pending:
            evaluator.state.record(path, {"epoch": epoch, "step": epoch, "metrics": {}})
        del listed[:-KEEP]
    assert len(evaluator.state.evaluated) <= NAMES_KEPT + KEEP + 1 and evaluator.state.done_count() == FILES
    assert evaluator.state.skipped == {} or set(evaluator.state.skipped) == {f"ckpt-{FILES // 2}"}
    skipped = [line for line in evaluator.log.lines if line.startswith("skipped")]
    assert skipped == [f"skipped ckpt-{FILES // 2}: deleted before it could be read"], skipped[:3]
    assert sum("evaluated.json keeps the names" in line for line in evaluator.log.lines) == 1
    assert len(saves) > FILES - 2 * NAMES_KEPT  # each fold is saved
    EvaluationState.save(evaluator.state)
    assert len(evaluator.state.path.read_bytes()) < 20_000


def test_status_shows_what_the_chief_and_the_evaluator_keep(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    config = cluster_config.load(write_cluster(tmp_path, cluster_document(logs_dir=str(logs))))
    kept = kept_text({"ledger_files": 61, "once_lines": 10000, "clock_advances": 3200, "delta_chain": 240})
    assert kept == "kept 61 files in the ledger, 10000 once-only lines, 3200 clock advances, 240 deltas in the chain"
    (logs / "chief-0.log").write_text(
        "[chief:0] 10:00:09 follow | files 3/4 done | step 58 | 4.2 steps/s | 118 ex/s | caught up | pieces w0:3 | "
        f"loss 1.0000 | {kept}\n")
    (logs / "evaluator-0.log").write_text(
        "[evaluator:0] 10:00:10 eval | ckpt-0-58 | step 58 | val_auc 0.7000 | best ckpt-0-58 | on up to 200 examples "
        "it has not trained on, from day_3 | kept 104 names\n")
    progress = run_progress(config)
    assert progress["kept"] == kept.removeprefix("kept ") and progress["evaluator_kept"] == "104 names in " \
        "evaluated.json"
    assert progress["last_validation"].startswith("ckpt-0-58: val_auc 0.7000")
    assert json.dumps(progress)  # as status.json holds it


def test_a_change_in_place_is_remembered_while_its_file_is_held_and_forgotten_once_it_goes(tmp_path):
    """Per file changed after it was taken, the watcher remembers the change (said once): only while the ledger
    holds the file, so files changed and then deleted leave nothing behind."""
    from online.follow.identity import Identity, head_of
    from online.follow.landing import Landing

    known: dict[str, Identity] = {}
    landing = Landing(tmp_path, "*", lambda path: None, known=lambda: known)
    for number in range(100):
        path = tmp_path / f"part-{number}"
        path.write_text("a\n")
        stat = path.stat()
        known[path.name] = Identity(stat.st_size, stat.st_mtime, stat.st_dev, stat.st_ino, head_of(path))
        with open(path, "a") as grown:
            grown.write("b\n")  # appended to after it was taken
        assert list(landing.look().changed) == [path.name] and not landing.look().changed  # said once
        del known[path.name]
        path.unlink()  # a retention job
        assert len(landing.reported_changes) <= 1
    landing.look()
    assert landing.reported_changes == set()
