"""Follow mode's intake (pure logic, real files, no TensorFlow): a file's identity and the ledger as the one record
of what is taken (renamed, rewritten, replaced, removed files; an old ledger), settling, backlog order, I/O errors
retried, bad data bounded, and a ledger that stays the size of the folder."""

from __future__ import annotations

import json
import os
import time

import pytest

from bench.online.ledger_churn import churned
from common.errors import UserError
from online.follow.intake import Intake
from online.follow.landing import KNOWN_STATS_PER_LOOK, Landing, Look
from online.follow.ledger import BAD, COMPACT_AFTER_S, LOST, QUARANTINED, RECENT_FILES, TRAINED, Ledger
from online.follow.quarantine import QuarantineReport, check_bound
from online.follow.watch import FOLDER, FolderWatch
from data.pieces import Piece
from data.whole_files import UNFINISHED, UNREADABLE, WHOLE, Verdict, text_missing, verdict_of


class Said:
    """The FollowReport's lines, kept."""

    def __init__(self):
        self.lines, self.said, self.log = [], set(), self

    def info(self, message, *args):
        self.lines.append(message % args)

    def once(self, key, message, *args):
        if key not in self.said:
            self.said.add(key)
            self.info(message, *args)

    def landed(self, entry, now):
        self.info("%s: landed", entry.name)

    def done(self, entry):
        self.info("%s: done", entry.name)

    def count(self, text: str) -> int:
        return sum(text in line for line in self.lines)


class Data:
    """The FollowedData's part the intake uses: one piece per file (none when empty)."""

    def __init__(self, root):
        self.root = root

    def pieces(self, name, size):
        return [Piece(name, 0, size)] if size else []

    def path(self, name):
        return str(self.root / name)


class Verdicts:
    """A verdict that counts the files it opened."""

    def __init__(self, answer=lambda path: Verdict(WHOLE)):
        self.answer, self.opened = answer, []

    def __call__(self, path):
        self.opened.append(path.name)
        return self.answer(path)


class Folder:
    """A followed folder: a Landing that reads the ledger's names, its looks taken into the ledger."""

    def __init__(self, root, ledger: Ledger | None = None, verdict=None, max_bad_fraction=0.5, **options):
        self.root, self.ledger, self.said = root, ledger or Ledger(), Said()
        self.verdict = verdict or Verdicts()
        self.landing = Landing(root, "*", self.verdict, known=self.ledger.known, **options)
        self.quarantine = root.parent / f"{root.name}-quarantine.jsonl"
        self.intake = Intake(ledger=self.ledger, data=Data(root), report=self.said,
                             quarantine=QuarantineReport(self.quarantine), max_bad_fraction=max_bad_fraction)

    def look(self, now: float) -> Look:
        look = self.landing.look(now=now)
        self.intake.take(look, now)
        return look

    def train_all(self, now: float) -> None:
        for key in self.ledger.pending(set()):
            self.ledger.finish(key, 10, now, steps=1)

    def reports(self) -> list[dict]:
        return [json.loads(line) for line in self.quarantine.read_text().splitlines()] if self.quarantine.exists() \
            else []


def write(path, text="1\n"):
    path.write_text(text)
    return path


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    return root


def names(look: Look) -> list[str]:
    return [landed.name for landed in look.landed]


def test_a_trained_file_renamed_or_linked_is_followed_never_opened_nor_trained_again(folder):
    write(folder / "day_0", "1\n2\n")
    watched, now = Folder(folder), time.time()
    watched.look(now)
    assert names(watched.look(now + 1)) == ["day_0"]
    watched.train_all(now + 2)
    opened = list(watched.verdict.opened)
    (folder / "day_0").rename(folder / "day_0.done")
    os.link(folder / "day_0.done", folder / "copy_0")
    look = watched.look(now + 3)
    assert look.landed == [] and sorted(look.renamed) == [("copy_0", "day_0"), ("day_0.done", "day_0")]
    [entry] = watched.ledger.files
    assert {entry.name, *entry.aliases} == {"day_0.done", "copy_0"} and entry.outcome == TRAINED
    assert set(watched.ledger.known()) == {"day_0.done", "copy_0"}
    assert watched.verdict.opened == opened and watched.said.count("the same file as day_0") == 2
    assert names(watched.look(now + 4)) == [] and names(watched.look(now + 5)) == []


def test_a_file_changed_in_place_after_it_was_taken_is_reported_once_while_running_or_down(folder):
    path = write(folder / "day_0", "1\n")
    watched, now = Folder(folder), time.time()
    watched.look(now)
    watched.look(now + 1)
    watched.train_all(now + 1)
    with open(path, "a") as handle:
        handle.write("2\n")  # a writer that went on after the file stood still
    look = watched.look(now + 2)
    assert look.landed == [] and list(look.changed) == ["day_0"]
    assert watched.look(now + 3).changed == {} and watched.said.count("changed in place after it was taken") == 1
    assert watched.ledger.files[0].changed == 1 and watched.ledger.problems()["changed_files"] == 1
    saved = watched.ledger.to_json()
    with open(path, "a") as handle:  # and again while the chief is down
        handle.write("3\n")
    resumed = Folder(folder, Ledger.from_json(saved))
    look = resumed.look(now + 10)
    assert look.landed == [] and list(look.changed) == ["day_0"] and resumed.verdict.opened == []
    assert [report["kind"] for report in watched.reports()] == ["changed", "changed"]


def test_a_new_file_under_an_old_name_is_a_new_file_even_on_the_old_inode(folder):
    path = write(folder / "day_0", "1\n2\n")
    watched, now = Folder(folder), time.time()
    watched.look(now)
    watched.look(now + 1)
    watched.train_all(now + 1)
    path.unlink()
    write(path, "7\n8\n9\n")  # a filesystem gives the old inode to the next file made (ext4 does, at once)
    watched.look(now + 2)
    assert watched.look(now + 3).landed[0].size == 6
    old, new = watched.ledger.files
    assert (old.outcome, old.gone, new.name, new.complete) == (TRAINED, now + 2, "day_0", False)
    assert watched.said.count("changed in place") == 0


def test_an_empty_file_is_done_at_once_and_one_that_later_holds_data_is_new(folder):
    path = write(folder / "hour_5", "")  # producers create the hour's file before writing it
    watched, now = Folder(folder, settle_s=5), time.time()
    watched.look(now)
    watched.look(now + 6)
    [entry] = watched.ledger.files
    assert entry.complete and entry.examples == 0 and list(watched.ledger.pending(set())) == []
    write(path, "1\n")
    watched.look(now + 7)
    assert names(watched.look(now + 13)) == ["hour_5"] and len(watched.ledger.files) == 2


def test_a_file_removed_before_it_was_trained_is_lost_and_a_trained_one_may_go(folder):
    write(folder / "day_0", "1\n")
    write(folder / "day_1", "1\n2\n")
    watched, now = Folder(folder), time.time()
    watched.look(now)
    watched.look(now + 1)
    watched.ledger.finish((0, 0), 1, now + 1)
    (folder / "day_0").unlink()
    (folder / "day_1").unlink()  # a retention job ahead of training
    watched.look(now + 2)
    trained, lost = watched.ledger.files
    assert (trained.outcome, lost.outcome, lost.lost_bytes) == (TRAINED, LOST, 4)
    assert list(watched.ledger.pending(set())) == [] and watched.ledger.problems()["lost_files"] == 1
    assert [(r["file"], r["kind"]) for r in watched.reports()] == [("day_1", LOST)]
    assert watched.said.count("day_1: deleted (or renamed out of the pattern) before it was trained") == 1
    watched.ledger.serve(1, now + 3, {"day_0"})
    assert watched.ledger.compact(now + 3) == 0  # gone a moment ago: still listed per file in the summary
    assert watched.ledger.compact(now + 2 + COMPACT_AFTER_S) == 2 and watched.ledger.files == []
    assert watched.ledger.done_count() == 2 and watched.ledger.problems()["lost_files"] == 1


def test_a_ledger_written_before_identities_is_read_and_its_files_never_opened(folder):
    path = write(folder / "day_0", "1\n2\n")
    stat = path.stat()
    old = json.dumps([{"name": "day_0", "size": stat.st_size, "mtime": stat.st_mtime, "landed": 1.0,
                       "pieces": [[0, 2], [2, 4]], "done": [0], "piece_count": 2, "examples": 1, "steps": 1,
                       "started": 1.0, "finished": None, "served_version": None, "served": None}])
    watched = Folder(folder, Ledger.from_json(old))
    assert list(watched.ledger.pending(set())) == [(0, 1)]
    look = watched.look(time.time())
    assert look.landed == [] and list(look.adopted) == ["day_0"] and watched.verdict.opened == []
    assert watched.ledger.files[0].ino == stat.st_ino  # recorded from now on
    assert Ledger.from_json(watched.ledger.to_json()).known()["day_0"].ino == stat.st_ino


def test_a_restarted_look_over_thousands_of_known_files_lists_them_and_opens_none(folder):
    count = KNOWN_STATS_PER_LOOK + 500
    for number in range(count):
        write(folder / f"part-{number}", "1\n")
    watched, now = Folder(folder), time.time()
    watched.look(now)
    assert len(watched.look(now + 1).landed) == count
    watched.train_all(now + 1)
    resumed = Folder(folder, Ledger.from_json(watched.ledger.to_json()))
    write(folder / "part-new", "1\n")
    first = resumed.look(now + 2)
    assert (first.listed, first.landed, first.opened, resumed.verdict.opened) == (count + 1, [], 0, [])
    assert first.stats == KNOWN_STATS_PER_LOOK + 1  # the known names in turn, and the one new name
    assert names(resumed.look(now + 3)) == ["part-new"]  # at the second look, as any new file


def test_a_file_written_in_place_with_pauses_is_taken_whole_after_it_stood_still_for_settle_s(folder):
    path, now = folder / "day_0", time.time()
    watched = Folder(folder, settle_s=10, verdict=Verdicts(lambda p: verdict_of(text_missing(p))))
    write(path, "1\n2\n")
    for step in range(4):  # whole lines, then a pause of 4 s: each pause looks like a finished file for one look
        watched.look(now + 4 * step)
        watched.look(now + 4 * step + 2)
        with open(path, "a") as handle:
            handle.write(f"{step}\n")
        os.utime(path, (now + 4 * step + 3, now + 4 * step + 3))
    watched.look(now + 16)
    assert watched.ledger.files == [] and "stood still for 10 s" in watched.look(now + 20).waiting["day_0"]
    [landed] = watched.look(now + 26).landed
    assert landed.size == path.stat().st_size == 12 and not landed.unfinished
    moved = write(folder / "day_1", "5\n")
    os.utime(moved, (now - 3600, now - 3600))  # written an hour ago elsewhere, then moved in
    watched.look(now + 27)
    assert names(watched.look(now + 28)) == ["day_1"]  # its time says it stood still: the second look takes it


def test_an_unfinished_file_waits_then_is_taken_as_it_is_and_a_corrupt_one_is_quarantined(folder):
    write(folder / "day_0", "1\n2")  # a producer that died mid-line
    write(folder / "day_1.gz", "garbage")
    verdicts = {"day_0": Verdict(UNFINISHED, "its last line has no newline yet"),
                "day_1.gz": Verdict(UNREADABLE, "is not a whole gzip stream")}
    watched, now = Folder(folder, verdict=Verdicts(lambda p: verdicts[p.name]), settle_s=1, unfinished_after_s=60), \
        time.time()
    watched.look(now)
    look = watched.look(now + 2)
    assert names(look) == ["day_1.gz"] and "taken as it is once it stood still for 60 s" in look.waiting["day_0"]
    assert watched.ledger.files[0].outcome == QUARANTINED and watched.ledger.files[0].lost_bytes == 7
    assert names(watched.look(now + 61)) == ["day_0"] and watched.ledger.files[1].unfinished
    assert [r["kind"] for r in watched.reports()] == [QUARANTINED, "unfinished"]
    assert watched.verdict.opened == ["day_0", "day_1.gz"]  # each once: a waiting file is not read at every look
    problems = watched.ledger.problems()
    assert (problems["quarantined_files"], problems["unfinished_files"], problems["untrained_bytes"]) == (1, 1, 7)


def test_a_backlog_is_taken_oldest_first_or_newest_first(folder):
    for name in ("day_10", "day_9", "day_2"):
        write(folder / name)
    watched, now = Folder(folder), time.time()
    watched.look(now)
    assert names(watched.look(now + 1)) == ["day_2", "day_9", "day_10"]  # landed together: natural name order
    write(folder / "day_11")
    watched.look(now + 2)
    watched.look(now + 3)
    for newest_first, order in ((False, ["day_2", "day_9", "day_10", "day_11"]),
                                (True, ["day_11", "day_10", "day_9", "day_2"])):
        assert [watched.ledger.by_seq[seq].name for seq, _ in watched.ledger.pending(set(), newest_first)] == order


def test_io_errors_on_a_file_or_the_folder_are_retried_at_the_next_look_and_counted(folder):
    write(folder / "day_0")
    failing = [OSError(5, "Input/output error")]

    def flaky(path):
        if failing:
            raise failing.pop()
        return Verdict(WHOLE)

    watched, now = Folder(folder, verdict=flaky), time.time()
    watched.look(now)
    look = watched.look(now + 1)
    assert look.landed == [] and "Input/output error" in look.errors["day_0"]
    assert names(watched.look(now + 2)) == ["day_0"] and watched.ledger.io_errors == 1
    assert watched.said.count("cannot be read now") == 1

    class Flaky:
        def __init__(self):
            self.looks = 0

        def look(self):
            self.looks += 1
            if self.looks <= 2:
                raise OSError(116, "Stale file handle")
            if self.looks == 3:
                raise KeyError("a fault of ours")
            return Look(listed=1)

    watch = FolderWatch(Flaky(), poll_s=0.01).start()
    found, deadline = [], time.monotonic() + 30
    while len(found) < 4 and time.monotonic() < deadline:
        found += watch.looks()
        time.sleep(0.01)
    watch.stop()
    assert [list(look.errors.values()) for look in found[:3]] == [["[Errno 116] Stale file handle"]] * 2 + \
        [["KeyError: 'a fault of ours'"]]
    assert FOLDER in found[0].errors and found[3].listed == 1  # the thread went on


def test_bad_data_is_counted_per_file_and_stops_the_run_when_most_recent_files_are_bad():
    ledger = Ledger()
    for number in range(RECENT_FILES):
        name = f"day_{number}"
        ledger.add(_landed(name), [Piece(name, 0, 10)], now=1.0)
        bad = number % 2 == 1
        ledger.finish((number, 0), 4, now=2.0, skipped=6 if bad else 1, bad_fraction=0.5)
    assert [entry.outcome for entry in ledger.files[:2]] == [TRAINED, BAD]
    check_bound(ledger, 0.5, "/data")  # 10 of 20: not more than half
    ledger.add(_landed("day_x"), [], now=3.0)
    ledger.end(ledger.files[-1], QUARANTINED, "cannot be read", now=3.0)
    with pytest.raises(UserError) as stopped:
        check_bound(ledger, 0.5, "/data")
    assert len(str(stopped.value).splitlines()) == 1 and "day_x" in str(stopped.value)
    assert "11 of the last 20 files" in str(stopped.value) and "max_bad_fraction" in str(stopped.value)
    check_bound(ledger, 1.0, "/data")  # 1: never
    assert ledger.problems()["skipped_records"] == 10 * 6 + 10 * 1


def test_a_ledger_stays_the_size_of_the_folder_after_100_000_files_come_and_go():
    """A file a second, the newest 50 kept by a retention job, a version served and the ledger compacted every
    1,000 (bench/online/ledger_churn.py; its default of a million files is the soak, run on purpose)."""
    ledger, sizes = churned(100_000)
    assert len(ledger.files) <= 50 + COMPACT_AFTER_S + 1000 and ledger.done_count() == 100_000
    assert max(sizes) < 1.05 * min(sizes)  # flat: the files there or gone lately, counts (numbers grow a digit)
    summary = Ledger.from_json(ledger.to_json())
    assert summary.problems()["skipped_records"] == sum(n % 3 for n in range(100_000))
    assert summary.compacted.examples + sum(e.examples for e in summary.files) == 10_000_000


def _landed(name: str, ino: int = 0):
    from online.follow.landing import Landed

    return Landed(name, 100, 1.0, 1.0, dev=1, ino=ino or hash(name) % 10**9, head="0:x")
