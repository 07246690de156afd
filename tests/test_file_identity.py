"""Follow mode's file identity where teams keep their data (pure logic, real files, no TensorFlow): symbolic links
are their targets, the same files reached through other inodes or another device are not trained again, and a
file that goes while its pieces run is counted, never a crash."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from data.pieces import Piece
from online.follow.identity import CHANGED, MOVED, NEW, SAME, Identity, head_of, judge, stat_of
from online.follow.ledger import LOST, QUARANTINED, TRAINED, Ledger
from test_disk_full import small_disk  # noqa: F401 (a fixture: a tmpfs of its own)
from test_follow_intake import Folder, names, write

LOOKS = 30  # looks of a folder a file must survive without being taken again


def landed_once(watched: Folder, start: float) -> list[str]:
    """Every name the folder's looks took over LOOKS looks from `start`, trained as they land."""
    taken = []
    for step in range(LOOKS):
        taken += names(watched.look(start + step))
        watched.train_all(start + step)
    return taken


def test_judge_lets_size_time_and_first_bytes_decide_never_the_inode_alone(tmp_path):
    path = write(tmp_path / "day_0", "1\n2\n")
    stat = stat_of(path)
    taken = Identity(stat.size, stat.mtime, stat.dev, stat.ino, head_of(path))
    assert judge(taken, stat, path) == SAME
    assert judge(taken, stat.__class__(stat.dev + 1, stat.ino + 7, stat.size, stat.mtime), path) == MOVED
    assert judge(Identity(stat.size, stat.mtime, stat.dev, stat.ino, "4:0000"), stat.__class__(
        stat.dev, stat.ino + 1, stat.size, stat.mtime), path) == NEW  # other first bytes: another file
    grown = stat.__class__(stat.dev, stat.ino, stat.size + 2, stat.mtime + 1)
    assert judge(taken, grown, path) == CHANGED  # same object, same first bytes: written to after it was taken
    assert judge(taken, stat.__class__(stat.dev, stat.ino + 1, stat.size + 2, stat.mtime + 1), path) == NEW


def test_a_symlinked_file_is_its_target_trained_once_and_a_repointed_link_is_a_new_file(tmp_path):
    folder, elsewhere = tmp_path / "data", tmp_path / "published"
    folder.mkdir()
    elsewhere.mkdir()
    write(elsewhere / "day_0.v1", "1\n2\n")
    (folder / "day_0").symlink_to(elsewhere / "day_0.v1")
    watched = Folder(folder)
    assert landed_once(watched, time.time()) == ["day_0"]
    assert watched.said.count("replaced") == 0 and watched.ledger.problems()["lost_files"] == 0
    write(elsewhere / "day_0.v2", "3\n4\n5\n")
    (folder / "day_0.tmp").symlink_to(elsewhere / "day_0.v2")
    os.replace(folder / "day_0.tmp", folder / "day_0")  # publish-by-link: the link now names another file
    assert landed_once(watched, time.time() + 100) == ["day_0"]
    first, second = watched.ledger.files
    assert (first.outcome, second.outcome, second.size) == (TRAINED, TRAINED, 6)


def test_a_symlinked_folder_is_followed_and_a_copy_it_is_repointed_to_is_not_trained_again(tmp_path):
    old, new, link = tmp_path / "old", tmp_path / "new", tmp_path / "data"
    old.mkdir()
    for day in range(3):
        write(old / f"day_{day}", f"{day}\n" * (day + 1))
    link.symlink_to(old)
    watched, now = Folder(link), time.time()
    assert sorted(landed_once(watched, now)) == ["day_0", "day_1", "day_2"]
    shutil.copytree(old, new)  # copy2 keeps times: other inodes, the same files
    write(new / "day_3", "3\n")
    (tmp_path / "data.tmp").symlink_to(new)
    os.replace(tmp_path / "data.tmp", link)
    assert landed_once(watched, now + 100) == ["day_3"]
    assert watched.said.count("reached through another device or inode") == 1
    assert {entry.ino for entry in watched.ledger.files[:3]} == {(new / f"day_{d}").stat().st_ino for d in range(3)}


def test_the_same_files_under_other_inodes_are_taken_up_and_opened_only_once(tmp_path):
    first, copy = tmp_path / "first", tmp_path / "copy"
    first.mkdir()
    for day in range(5):
        write(first / f"day_{day}", f"{day}\n")
    watched, now = Folder(first), time.time()
    landed_once(watched, now)
    shutil.copytree(first, copy)  # what another node's mount, a remount or `rsync -a` shows a restarted chief
    resumed = Folder(copy, Ledger.from_json(watched.ledger.to_json()))
    look = resumed.look(now + 100)
    assert look.landed == [] and sorted(look.moved) == [f"day_{d}" for d in range(5)] and look.gone == {}
    assert resumed.look(now + 101).opened == 0 and landed_once(resumed, now + 102) == []


def test_a_chief_that_reaches_the_folder_through_another_device_trains_nothing_again(tmp_path, small_disk):  # noqa: F811
    """On a tmpfs of its own (tests/test_disk_full.py's: root only; under CI=true a skip fails): another device."""
    first = tmp_path / "first"
    first.mkdir()
    for day in range(4):
        write(first / f"day_{day}", f"{day}\n" * 3)
    watched, now = Folder(first), time.time()
    landed_once(watched, now)
    copy = small_disk / "data"
    subprocess.run(["cp", "-rp", str(first), str(copy)], check=True, timeout=30)
    assert os.stat(copy / "day_0").st_dev != os.stat(first / "day_0").st_dev  # not a bind mount: another device
    write(copy / "day_9", "9\n")
    resumed = Folder(copy, Ledger.from_json(watched.ledger.to_json()))
    assert landed_once(resumed, now + 100) == ["day_9"]
    assert resumed.ledger.problems()["lost_files"] == 0 and len(resumed.ledger.files) == 5


class TwoPieces:
    """FollowedData's part the intake uses: every file in two pieces."""

    def __init__(self, root):
        self.root = root

    def pieces(self, name, size):
        return [Piece(name, 0, size // 2), Piece(name, size // 2, size)]

    def path(self, name):
        return str(self.root / name)


def test_a_file_deleted_while_its_pieces_run_is_counted_what_they_trained_and_the_run_goes_on(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    write(folder / "day_0", "1\n2\n3\n4\n")
    watched, now = Folder(folder), time.time()
    watched.intake.data = TwoPieces(folder)
    watched.look(now)
    watched.look(now + 1)
    for key in watched.ledger.pending(set()):  # both pieces handed out
        watched.ledger.start(key, now + 1)
    (folder / "day_0").unlink()  # a retention job or the producer, while they run
    watched.look(now + 2)
    [entry] = watched.ledger.files
    assert (entry.outcome, entry.lost_bytes) == (LOST, 8) and watched.ledger.problems()["lost_files"] == 1
    assert watched.ledger.piece((0, 0)) is not None and list(watched.ledger.pending(set())) == []
    assert watched.ledger.finish((0, 0), 2, now + 3, steps=1) is False  # it trained: counted, not a crash
    assert (entry.outcome, entry.lost_bytes, entry.examples) == (LOST, 4, 2)
    watched.ledger.finish((0, 1), 2, now + 4, steps=1)
    assert (entry.outcome, entry.lost_bytes, entry.examples) == (TRAINED, 0, 4)  # every piece trained after all
    assert watched.ledger.problems()["lost_files"] == 0 and watched.ledger.piece((0, 1)) is None


def test_a_piece_of_a_file_done_with_is_named_no_more(tmp_path):
    ledger = Ledger()
    folder = tmp_path / "data"
    folder.mkdir()
    watched, now = Folder(folder, ledger), time.time()
    watched.intake.data = TwoPieces(folder)
    write(folder / "day_0", "1\n2\n")
    watched.look(now)
    watched.look(now + 1)
    ledger.end(ledger.files[0], QUARANTINED, "a corrupt record", now + 2)
    assert ledger.piece((0, 1)) is None and ledger.finish((0, 1), 1, now + 3) is False


def test_looks_queued_while_a_resumed_chief_is_busy_say_the_moved_files_once(tmp_path):
    """The watcher's thread queues looks while a resumed chief restores and reads what was served: each finds the
    files under other inodes, but they are said once, when first taken up (a 0.5 run resumed on a copy said it 30
    times)."""
    first, copy = tmp_path / "first", tmp_path / "copy"
    first.mkdir()
    for day in range(3):
        write(first / f"day_{day}", f"{day}\n")
    watched, now = Folder(first), time.time()
    landed_once(watched, now)
    shutil.copytree(first, copy)
    resumed = Folder(copy, Ledger.from_json(watched.ledger.to_json()))
    queued = [resumed.landing.look(now=now + 100 + k) for k in range(5)]  # all taken before the first is read
    assert all(sorted(look.moved) == ["day_0", "day_1", "day_2"] for look in queued)
    for k, look in enumerate(queued):
        resumed.intake.take(look, now + 100 + k)
    assert resumed.said.count("reached through another device or inode") == 1
    assert landed_once(resumed, now + 200) == [] and resumed.said.count("reached through another device") == 1
