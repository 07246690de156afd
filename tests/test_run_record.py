"""The follow-mode run's record on real files: one writer by generation, the step served, safe_to_delete.json, and
files deleted before they were safe counted by name (pure logic; the run is in test_follow_retention)."""

from __future__ import annotations

import json
import logging

import pytest

from common.errors import UserError
from online.follow.file_entry import LOST, TRAINED, FileEntry
from online.follow.ledger import Ledger
from online.follow.run_record import SAFE_TO_DELETE, RunRecord, Superseded
from online.publish.versions import ServingVersions

LOG = logging.getLogger("test")


def _version(serving, number: int, step: int, files: list[str]) -> None:
    extra = serving / str(number) / "assets.extra"
    extra.mkdir(parents=True)
    (extra / "trained_through.json").write_text(json.dumps({
        "version": number, "written": 1.0, "optimizer_step": step,
        "files_done": [{"name": name, "landed": 5.0} for name in files]}))


def _delta(serving, version: int, sequence: int, read_step: int, files: list[str]) -> None:
    folder = serving / "deltas" / f"{version}.{sequence}"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({
        "version": version, "sequence": sequence, "read_step": read_step, "written": 10.0 + sequence,
        "trained_through": {"files_done": [{"name": name, "landed": 6.0} for name in files]}}))


def _entry(name: str, *, done: bool) -> FileEntry:
    entry = FileEntry(name, 100, 1.0, 2.0, [[0, 100]], piece_count=1)
    if done:
        entry.done, entry.finished, entry.outcome = [0], 3.0, TRAINED
    return entry


def test_a_chief_of_an_older_generation_refuses_to_publish_with_one_line(tmp_path):
    first, second = RunRecord(tmp_path, tmp_path / "data", LOG), RunRecord(tmp_path, tmp_path / "data", LOG)
    assert (first.take_generation(), second.take_generation()) == (1, 2)
    second.check_writer()
    with pytest.raises(Superseded) as refused:
        first.check_writer()
    assert isinstance(refused.value, UserError)
    line = refused.value.problems[0].text()
    assert "\n" not in line and "generation 2" in line and "generation 1" in line and "publishes nothing" in line
    (tmp_path / "writers" / "4.json").write_text("{}")  # a chief that took 4 while this one looked: the next is 5
    assert RunRecord(tmp_path, tmp_path / "data", LOG).take_generation() == 5


def test_the_served_step_is_the_newest_versions_or_its_newest_deltas(tmp_path):
    serving = tmp_path / "serving"
    _version(serving, 2, 90, [])
    _version(serving, 3, 100, [])
    _delta(serving, 2, 9, 500, [])  # an older version's: not what is served
    _delta(serving, 3, 1, 120, [])
    _delta(serving, 3, 2, 140, [])
    record = RunRecord(tmp_path, tmp_path / "data", LOG)
    assert record.read_served(ServingVersions(serving, keep=5)) == 140
    assert record.served_at == "version 3 delta 2"
    assert not record.serves_no_older(139) and record.serves_no_older(140)
    assert RunRecord(tmp_path, tmp_path / "data", LOG).read_served(ServingVersions(tmp_path / "none", keep=5)) == 0


def test_a_resumed_ledger_knows_each_file_served_by_the_version_or_by_the_delta_that_first_served_it(tmp_path):
    serving = tmp_path / "serving"
    _version(serving, 3, 100, ["day_0"])
    _delta(serving, 3, 1, 120, ["day_1"])
    _delta(serving, 3, 2, 140, ["day_2"])
    ledger = Ledger([_entry(name, done=True) for name in ("day_0", "day_1", "day_2", "day_3")])
    for served in RunRecord(tmp_path, tmp_path / "data", LOG).served_records(ServingVersions(serving, keep=5)):
        ledger.served_from(served)
    assert [(e.name, e.served_version, e.served) for e in ledger.files] == [
        ("day_0", 3, 1.0), ("day_1", 3, 11.0), ("day_2", 3, 12.0), ("day_3", None, None)]  # when first served


def test_safe_to_delete_lists_the_files_done_in_the_checkpoint_under_every_name(tmp_path):
    done, running = _entry("day_1", done=True), _entry("day_2", done=False)
    done.aliases = ["link_1"]
    record = RunRecord(tmp_path, tmp_path / "data", LOG)
    record.take_generation()
    record.write_safe_to_delete(Ledger([done, running]), "ckpt-0-40", 40)
    record.flush()
    written = json.loads((tmp_path / SAFE_TO_DELETE).read_text())
    assert written["files"] == ["day_1", "link_1"] and written["checkpoint"] == "ckpt-0-40"
    assert written["optimizer_step"] == 40 and written["generation"] == 1
    assert not list(tmp_path.glob("*.partial"))


def test_files_served_but_deleted_before_the_checkpoint_a_resume_reads_are_counted_lost_by_name(tmp_path, caplog):
    data, serving = tmp_path / "data", tmp_path / "serving"
    data.mkdir()
    (data / "day_4").write_text("still here")
    _version(serving, 1, 50, ["day_1", "day_3", "day_4", "day_5"])
    _delta(serving, 1, 1, 60, ["day_2"])
    deleted_once_safe = _entry("day_5", done=True)
    deleted_once_safe.gone = 4.0  # the retention job deleted it once safe_to_delete.json listed it
    ledger = Ledger([_entry("day_1", done=False), _entry("day_3", done=True), _entry("day_4", done=False),
                     deleted_once_safe])
    folded = serving / "1" / "assets.extra" / "trained_through.json"  # an older file, folded into counts since
    through = json.loads(folded.read_text())
    folded.write_text(json.dumps({**through, "files_done": [*through["files_done"], {"name": "day_0", "seq": 0}]}))
    ledger.next_seq = 9
    with caplog.at_level(logging.WARNING):
        lost = RunRecord(tmp_path, data, LOG).count_deleted_before_safe(ledger, ServingVersions(serving, keep=5))
    assert sorted(lost) == ["day_1", "day_2"]  # day_3 and day_5 were done in the checkpoint, day_0 folded away in
    # it; day_4 is still in the folder
    by_name = {entry.name: entry for entry in ledger.files}
    assert by_name["day_1"].outcome == by_name["day_2"].outcome == LOST
    assert "deleted before safe_to_delete.json" in by_name["day_2"].note and by_name["day_2"].gone is not None
    assert ledger.problems()["lost_files"] == 2 and "day_1" not in ledger.known()
    assert by_name["day_4"].outcome == TRAINED and not by_name["day_4"].complete
    assert "2 files deleted before safe_to_delete.json listed them: day_1, day_2" in caplog.text
