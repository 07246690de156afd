"""Follow mode on real servers against the data real producers leave: each kind of bad file dropped into a followed
folder is counted as stated while the good files train exactly once, and a chief restarted over a folder of
2,000 trained files takes the first new file at once (it opens none of the old ones), then stops with one line
when the data turns plainly wrong."""

from __future__ import annotations

import gzip
import json
import os
import threading
import time

import pytest

import criteokit
from clusterkit import derive_cluster, finish, start_module, wait_for_line
from launcher.report import _follow_lines
from launcher.status import LEAD_LINES, _follow_progress, _tail
from test_follow import FOLLOW, write_day

pytestmark = pytest.mark.cluster

BAD_DATA = {**FOLLOW, "settle_s": 3, "unfinished_after_s": 8, "stop_when_idle_s": 8}


def write_in_place_with_pauses(path, rows, *, chunks: int, pause_s: float) -> threading.Thread:
    """A producer that appends whole lines to its file in place, pausing between chunks (each pause looks like
    a finished file to anyone who takes a file once it stood still over one look)."""
    lines = [criteokit.line(row) + "\n" for row in rows]
    size = -(-len(lines) // chunks)

    def write():
        for chunk in range(chunks):
            with open(path, "a") as handle:
                handle.write("".join(lines[chunk * size:(chunk + 1) * size]))
            time.sleep(pause_s)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def corrupt_in_place(path) -> None:
    """Garbles a gzip file's stream, keeping its size and modification time (no look can see it changed)."""
    stat, content = path.stat(), bytearray(path.read_bytes())
    for index in range(20, len(content) - 8):
        content[index] ^= 0x5A
    with open(path, "r+b") as handle:
        handle.write(content)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_each_kind_of_bad_data_is_counted_and_the_good_files_train_once(shared_servers, tmp_path):
    data, output, log = tmp_path / "data", tmp_path / "output", tmp_path / "chief.log"
    data.mkdir()
    write_day(data, "day_0", 3000, 0)  # many pieces: the files behind it wait
    write_day(data, "doomed", 100, 3700)  # lands with day_0, after it in name order
    write_day(data, "late.gz", 200, 3900)  # whole when it lands; corrupted before a worker reads it
    write_day(data, "good.gz", 200, 3000)
    (data / "empty").write_bytes(b"")
    (data / "garbage").write_bytes(bytes(range(256)) * 64)
    criteokit.write(data / "malformed", criteokit.rows(100, first=3200),
                    extra_lines={10: "1\tnot a number", 50: "2\t" + "\t" * 38, 90: "garbage"})
    zipped = gzip.compress(("\n".join(criteokit.line(r) for r in criteokit.rows(200, first=3300)) + "\n").encode())
    (data / "cut.gz").write_bytes(zipped[:len(zipped) // 2])  # a producer that died mid-stream
    cluster = derive_cluster(shared_servers, tmp_path, evaluator=False, training={
        **BAD_DATA, "data_dir": str(data), "output_dir": str(output)})
    chief = start_module("coordinator.train", "--cluster", str(cluster), log_path=log)
    try:
        assert wait_for_line(log, "day_0: started", 300, chief), log.read_text()[-3000:]
        assert "doomed: landed" in log.read_text() and "late.gz: landed" in log.read_text()
        (data / "doomed").unlink()  # a retention job, before its piece (behind day_0's) was handed out
        corrupt_in_place(data / "late.gz")  # found by the piece that reads it: that file alone is quarantined
        writer = write_in_place_with_pauses(data / "in_place", criteokit.rows(160, first=3500), chunks=4,
                                            pause_s=1.0)  # twice a look; settle_s 3 outlasts a 2 s stall too
        writer.join()
        code = finish(chief, timeout_s=600)
    finally:
        finish(chief, timeout_s=1)
    text = log.read_text()
    assert code == [0], text[-3000:]
    summary = json.loads((output / "summary.json").read_text())
    per_file = {f["name"]: f for f in summary["follow"]["per_file"]}
    assert {name: (f["outcome"], f["examples"]) for name, f in per_file.items() if name != "cut.gz"} == {
        "day_0": ("trained", 3000), "good.gz": ("trained", 200), "empty": ("trained", 0),
        "garbage": ("quarantined", 0), "malformed": ("trained", 100), "in_place": ("trained", 160),
        "doomed": ("lost", 0), "late.gz": ("quarantined", 0)}  # the good ones whole, once; in_place not half taken
    assert "cannot be read" in per_file["late.gz"]["note"]
    assert per_file["malformed"]["skipped"] == 3
    cut = per_file["cut.gz"]
    assert cut["outcome"] == "trained" and 0 < cut["examples"] < 200 and "no end yet" in cut["note"]
    # the pieces TensorFlow cancelled when late.gz failed ran again: only their steps taken before count twice
    assert summary["optimizer_steps"] >= summary["follow"]["steps"]
    problems = summary["follow"]["problems"]
    assert (problems["quarantined_files"], problems["lost_files"], problems["unfinished_files"]) == (2, 1, 1)
    assert problems["skipped_records"] == 3 + cut["skipped"] and problems["untrained_bytes"] > 0
    kinds = [(item["file"], item["kind"]) for item in map(json.loads, (output / "quarantine.jsonl").open())]
    assert {("garbage", "quarantined"), ("cut.gz", "unfinished"), ("doomed", "lost"), ("malformed", "skipped"),
            ("late.gz", "quarantined")} <= set(kinds)
    assert "garbage: quarantined: it is not Criteo data: its first line has 2 tab-separated fields" in text
    assert "doomed: deleted (or renamed out of the pattern) before it was trained: counted as lost" in text
    assert "in_place: changed in place" not in text and "in_place: landed" in text
    status = _follow_progress(_tail(log, LEAD_LINES).found)  # what `sh run.sh status` shows
    assert "2 files quarantined" in status["not_trained"] and "1 files lost" in status["not_trained"]
    report = _follow_lines(type("Summary", (), {"follow": summary["follow"], "optimizer_steps": 1})(), "out")
    assert report[-1].startswith("not trained: ") and "2 files quarantined" in report[-1]


def test_a_restart_over_2000_trained_files_takes_the_first_new_file_at_once(shared_servers, tmp_path):
    data, output = tmp_path / "data", tmp_path / "output"
    data.mkdir()
    for number in range(1980):
        (data / f"part-{number:05d}").write_bytes(b"")  # done at once: no piece each
    for number in range(20):
        write_day(data, f"part-{1980 + number:05d}.gz", 1, number)  # a gzip file is read whole to check it
    training = {**FOLLOW, "data_dir": str(data), "output_dir": str(output), "stop_when_idle_s": 4}
    cluster = derive_cluster(shared_servers, tmp_path, evaluator=False, training=training)
    first, log = start_module("coordinator.train", "--cluster", str(cluster), log_path=tmp_path / "first.log"), \
        tmp_path / "resumed.log"
    try:
        assert finish(first, timeout_s=600) == [0], (tmp_path / "first.log").read_text()[-3000:]
        assert "files 2000/2000 done" in (tmp_path / "first.log").read_text()
        resumed = start_module("coordinator.train", "--cluster", str(cluster), "--stop_when_idle_s", "0",
                               log_path=log)
        assert wait_for_line(log, "data: 2000 files done", 300, resumed), log.read_text()[-3000:]
        write_day(data, "part-new.gz", 50, 100)
        assert wait_for_line(log, "part-new.gz: done", 300, resumed), log.read_text()[-3000:]
        for number in range(11):  # a producer whose format changed: every new file unreadable
            (data / f"part-bad-{number}").write_text("id,clicked\n1,0\n")
        codes = finish(resumed, timeout_s=300)
    finally:
        finish(first, timeout_s=1)
    text = log.read_text()
    assert codes == [2], text[-3000:]
    first_look = next(line for line in text.splitlines() if "first look at" in line)
    assert "2000 held by the ledger (not opened again)" in first_look and first_look.endswith(" 0 opened")
    after = text[text.index(first_look):text.index("part-new.gz: landed")]
    assert "part-0" not in after  # no old file checked, waited for or taken before the new one (at once: how many
    # seconds that took is the machine's load, not asserted)
    [stopped] = [line for line in text.splitlines() if "max_bad_fraction" in line]
    assert stopped.startswith("error: training.data_dir") and "of the last 20 files were bad" in stopped
