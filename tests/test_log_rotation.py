"""Logs bounded over weeks: a task's log rotated under a process that keeps writing to it, the console and
`status` reading across a rotation, `status` finding the last serving line of a long log while reading only what
the log gained since its last look."""

from __future__ import annotations

import os
import sys
import time

from clusterkit import cluster_document, write_cluster
from cluster import config as cluster_config
from launcher import log_tail, run_outputs
from launcher.console import LogFollower
from launcher.log_rotation import older_files, rotate_if_large
from launcher.log_tail import LogTail
from launcher.process import start, stop
from launcher.status import SERVING

# Each line in one write, as a task's logging writes its records: print() under PYTHONUNBUFFERED=1 (which tasks get,
# and these machines set) writes the text and its newline apart, and a cut between the two left the newline alone at
# the top of the current file (a fresh-clone run, 2026-12-07): no rotation can join another process's two writes.
WRITER = """
import sys, time
for number in range(1_000_000):
    sys.stdout.write(f"[chief:0] 10:00:00 line {number:07d} " + "x" * 60 + "\\n")
    sys.stdout.flush()
    time.sleep(0.0005)
"""


def numbers(text: str) -> list[int]:
    return [int(line.split("line ")[1].split()[0]) for line in text.splitlines() if "line " in line]


def test_a_log_rotates_under_a_task_that_keeps_writing_and_the_current_file_keeps_its_name(tmp_path):
    log, kept = tmp_path / "logs" / "chief-0.log", 3
    _, record = start([sys.executable, "-c", WRITER], cwd=tmp_path, env=dict(os.environ), log_path=log,
                      pid_path=tmp_path / "logs" / "chief-0.pid")
    try:
        rotations, deadline = 0, time.monotonic() + 60
        while rotations < 4 and time.monotonic() < deadline:  # more rotations than files kept
            rotations += rotate_if_large(log, max_mb=0.02, files_kept=kept)
            time.sleep(0.01)
        assert rotations == 4
        size = log.stat().st_size
        deadline = time.monotonic() + 10
        while log.stat().st_size == size and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log.stat().st_size > size  # the task still writes to chief-0.log, the current file
    finally:
        stop(record, grace_s=5)
    assert [p.name for p in older_files(log)] == ["chief-0.log.1", "chief-0.log.2"]  # 3 files in all
    texts = [p.read_bytes() for p in (*reversed(older_files(log)), log)]
    assert all(b"\0" not in text for text in texts)  # appended at the new end: no hole where the text was
    written = [n for text in texts for n in numbers(text.decode())]
    assert written == sorted(written) and len(set(written)) == len(written)  # in order, none twice
    broken = [line for text in texts for line in text.decode().splitlines() if not line.startswith("[chief:0] ")]
    assert not broken, broken[:3]  # whole lines only

    config = cluster_config.load(write_cluster(tmp_path, cluster_document(logs_dir=str(tmp_path / "logs"))))
    (tmp_path / "logs" / "previous").mkdir()
    (tmp_path / "logs" / "previous" / "chief-0.log.7").write_text("an earlier run's\n")
    moved = run_outputs.archive_logs(config, config.tasks())  # the next run: its logs start empty
    assert sorted(moved) == ["chief-0.log", "chief-0.log.1", "chief-0.log.2"]
    assert sorted(p.name for p in (tmp_path / "logs" / "previous").iterdir()) == sorted(moved)


def test_a_line_the_copy_saw_only_in_part_is_dropped_whole(tmp_path):
    """The copy may read a line while the task is still writing it (a line across a page is appended a page at a
    time); the cut then takes the rest: the older file keeps whole lines only."""
    log = tmp_path / "chief-0.log"
    log.write_bytes(b"[chief:0] one\n" * 2000 + b"[chief:0] half of a li")
    assert rotate_if_large(log, max_mb=0.01, files_kept=2)
    assert log.read_bytes() == b"" and (tmp_path / "chief-0.log.1").read_bytes() == b"[chief:0] one\n" * 2000


def test_the_console_shows_every_line_across_a_rotation(tmp_path, capsys):
    logs = tmp_path / "logs"
    logs.mkdir()
    config = cluster_config.load(write_cluster(tmp_path, cluster_document(logs_dir=str(logs))))
    log = logs / "chief-0.log"
    log.write_text("")
    follower = LogFollower(config)
    with open(log, "a") as task:
        for number in range(3):
            print(f"[chief:0] 10:00:00 line {number}", file=task, flush=True)
        follower.echo_new_lines()
        for number in range(3, 6):  # written after the console's last look, before the rotation
            print(f"[chief:0] 10:00:00 line {number}", file=task, flush=True)
        assert rotate_if_large(log, max_mb=1e-6, files_kept=2)
        print("[chief:0] 10:00:00 line 6", file=task, flush=True)
        follower.echo_new_lines()
    assert numbers(capsys.readouterr().err) == list(range(7))


def serving(version: int) -> str:
    return f"[chief:0] 10:00:00 serving | version {version} | ckpt-0-{version} | 1 file newly served | ...\n"


def progress_lines(count: int) -> str:
    return "".join(f"[chief:0] 10:00:01 follow | files 3/4 done | step {n} | 4.2 steps/s | 118 ex/s | caught up\n"
                   for n in range(count))


def test_status_finds_the_last_serving_line_of_a_long_log_and_then_reads_only_what_it_gained(tmp_path,
                                                                                             monkeypatch):
    log = tmp_path / "chief-0.log"
    log.write_text(serving(3) + progress_lines(5000))  # far more than the 200 last lines status once read
    tail = LogTail(log, {"serving": SERVING}).update()
    assert tail.found["serving"][1] == "3"
    reads = []
    original = LogTail._read
    monkeypatch.setattr(LogTail, "_read", lambda self, path, start, **kw: reads.append(start) or original(
        self, path, start, **kw))
    with open(log, "a") as task:
        task.write(progress_lines(10) + serving(4))
    assert tail.update().found["serving"][1] == "4" and reads == [tail.offset - len(progress_lines(10) +
                                                                                     serving(4))]
    assert rotate_if_large(log, max_mb=1e-6, files_kept=2)
    with open(log, "a") as task:
        task.write(serving(5))
    assert tail.update().found["serving"][1] == "5"

    monkeypatch.setattr(log_tail, "LOOK_BACK_BYTES", 4096)  # the first look is bounded
    older = tmp_path / "older.log"
    older.write_text(serving(9) + progress_lines(100))
    assert "serving" not in LogTail(older, {"serving": SERVING}).update().found


def test_a_first_look_after_a_rotation_reads_the_older_files_tail(tmp_path):
    log = tmp_path / "chief-0.log"
    log.write_text(serving(2) + progress_lines(3))
    assert rotate_if_large(log, max_mb=1e-6, files_kept=2)
    log.write_text(progress_lines(2))
    assert LogTail(log, {"serving": SERVING}).update().found["serving"][1] == "2"

