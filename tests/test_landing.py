"""Follow mode's data side: which files are data, when a file counts as landed, its pieces and their examples."""

from __future__ import annotations

import gzip
import os
import time

import criteokit
from cluster.training_parse import parse_training_options
from online.follow.identity import Identity
from online.follow.landing import Landing, landing_for
from data.folder import data_files, listing, natural_key
from data.pieces import cut_into_pieces
from data.whole_files import (UNFINISHED, UNREADABLE, WHOLE, Verdict, gzip_missing, text_missing, tfrecord_missing,
                              verdict_of)


def whole(path):
    return Verdict(WHOLE)


def names(look):
    return [landed.name for landed in look.landed]


def test_a_file_lands_once_its_size_stood_still_over_one_look_and_hidden_names_never_do(tmp_path):
    for name in ("day_10", "day_2", ".day_3.tmp", "_SUCCESS", "_temporary/part-0", "sub/.part-1.crc"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    os.utime(tmp_path / ".day_3.tmp", (1000.0, 1000.0))  # written long ago elsewhere, then moved in
    now = time.time()
    landing = Landing(tmp_path, "**/*", whole)
    assert names(landing.look(now=now)) == []  # seen once: it may still be growing
    assert names(landing.look(now=now + 10)) == ["day_2", "day_10"]  # natural order
    assert names(landing.look(now=now + 20)) == []  # each lands once
    (tmp_path / ".day_3.tmp").rename(tmp_path / "day_3")  # the safe producer: write hidden, then rename
    assert names(landing.look(now=now + 30)) == []
    [landed] = landing.look(now=now + 40).landed
    assert landed.name == "day_3" and landed.landed == now + 20  # no earlier than the look before it appeared
    fresh = Landing(tmp_path / "sub", "*", whole)
    fresh.look(now=time.time() - 1)
    (tmp_path / "sub" / "day_4").write_text("x\n")
    written = (tmp_path / "sub" / "day_4").stat().st_mtime
    fresh.look(now=written + 5)
    assert fresh.look(now=written + 6).landed[0].landed == written  # when its last byte was written


def test_a_growing_file_waits_and_one_without_its_last_newline_waits_longer(tmp_path):
    path = tmp_path / "part-0"
    path.write_text("a\n")
    landing = Landing(tmp_path, "*", lambda p: verdict_of(text_missing(p)), unfinished_after_s=100)
    landing.look(now=1.0)
    with open(path, "a") as handle:
        handle.write("b\nc")  # a writer in the middle of a line
    look = landing.look(now=2.0)
    assert look.landed == [] and "taken once it stood still" in look.waiting["part-0"] and look.grew == {"part-0"}
    look = landing.look(now=3.0)
    assert look.landed == [] and "no newline" in look.waiting["part-0"] and not look.grew
    with open(path, "a") as handle:
        handle.write("\n")
    landing.look(now=4.0)
    assert names(landing.look(now=5.0)) == ["part-0"]


def test_resumed_runs_skip_the_files_they_took(tmp_path):
    (tmp_path / "a").write_text("1\n")
    (tmp_path / "b").write_text("2\n")
    stat = (tmp_path / "a").stat()
    known = {"a": Identity(stat.st_size, stat.st_mtime, stat.st_dev, stat.st_ino)}
    landing = Landing(tmp_path, "*", whole, known=lambda: known)
    landing.look(now=1.0)
    assert names(landing.look(now=2.0)) == ["b"]


def test_a_listing_reads_directories_as_path_glob_would(tmp_path):
    for name in ("a/part-1", "a/b/part-2", "part-3", "a/_tmp/part-4", "a/.part-5", "x.txt", "a/b/c/d.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    for pattern in ("*", "*/part-*", "**/part-*", "**/*", "a/**/*.txt", "**"):
        expected = {p.relative_to(tmp_path).as_posix() for p in tmp_path.glob(pattern) if p.is_file()}
        expected = {n for n in expected if not any(part.startswith((".", "_")) for part in n.split("/"))}
        assert set(listing(tmp_path, pattern, lambda name: False)) == expected, pattern
    assert data_files(tmp_path, "*", lambda name: name == "x.txt") == {"part-3": (2, (tmp_path / "part-3").stat()
                                                                                  .st_mtime)}


def test_whole_file_checks_see_cut_gzip_streams_and_tfrecords(tmp_path):
    data = gzip.compress(b"line 1\nline 2\n" * 1000)
    (tmp_path / "cut.gz").write_bytes(data[:len(data) // 2])
    (tmp_path / "whole.gz").write_bytes(data)
    (tmp_path / "two.gz").write_bytes(data + gzip.compress(b"more\n"))  # `cat a.gz b.gz`
    assert "no end yet" in gzip_missing(tmp_path / "cut.gz")
    assert gzip_missing(tmp_path / "whole.gz") is None and gzip_missing(tmp_path / "two.gz") is None
    (tmp_path / "junk.gz").write_bytes(data + b"junk")
    assert "not a whole gzip stream" in gzip_missing(tmp_path / "junk.gz")
    record = (5).to_bytes(8, "little") + b"crc!" + b"hello" + b"crc!"
    (tmp_path / "r.tfrecord").write_bytes(record * 3)
    assert tfrecord_missing(tmp_path / "r.tfrecord") is None
    (tmp_path / "r.tfrecord").write_bytes(record * 3 + record[:10])
    assert "ends inside a record" in tfrecord_missing(tmp_path / "r.tfrecord")


def test_natural_order_counts_digits_as_numbers():
    assert sorted(["day_10", "day_9", "day_1.gz"], key=natural_key) == ["day_1.gz", "day_9", "day_10"]


def test_pieces_of_a_plain_file_hold_each_line_once(tmp_path):
    path = criteokit.write(tmp_path / "day_0", criteokit.rows(500))
    size = path.stat().st_size
    pieces = cut_into_pieces(tmp_path, "day_0", size, size // 7)
    assert len(pieces) == 7 and pieces[0].begin == 0 and pieces[-1].end == size
    assert all(a.end == b.begin for a, b in zip(pieces, pieces[1:]))
    content = path.read_bytes()
    assert all(piece.begin == 0 or content[piece.begin - 1:piece.begin] == b"\n" for piece in pieces)
    assert cut_into_pieces(tmp_path, "empty", 0, 100) == []


def followed(tmp_path, **extra):
    from data import followed_for

    options = parse_training_options({"model": "dlrm", "dataset": "criteo", "data_dir": str(tmp_path),
                                      "follow_data": True, "piece_mb": 0.01, **extra})
    return followed_for(options, tmp_path)


def test_each_piece_reads_its_own_examples_and_together_every_line_once(tmp_path):
    criteokit.write(tmp_path / "day_0", criteokit.rows(400))
    criteokit.write(tmp_path / "day_1.gz", criteokit.rows(300, first=400), gz=True)
    (tmp_path / "test.txt").write_text("\t".join(["1"] * 39) + "\n")  # Kaggle's unlabelled file: not data
    data = followed(tmp_path)
    landing = landing_for(data)
    landing.look(now=1.0)
    landed = landing.look(now=2.0).landed
    assert [f.name for f in landed] == ["day_0", "day_1.gz"]
    pieces = [piece for file in landed for piece in data.pieces(file.name, file.size)]
    assert len(pieces) > 3 and pieces[-1].whole  # day_0 in ~10 KB ranges, the gzip file whole
    seen = [criteokit.row_number(features["dense"]) for piece in pieces
            for features, _ in data.piece_examples(piece)]
    assert sorted(seen) == list(range(700))


def test_samples_of_a_followed_folder_read_its_newest_files_with_bytes_never_the_whole_folder(tmp_path):
    from data.followed import SAMPLE_FILES

    for number in range(40):  # the newest last; every other one an empty part, as Spark writes them
        path = criteokit.write(tmp_path / f"part-{number:03d}", criteokit.rows(5, first=5 * number)) \
            if number % 2 else tmp_path / f"part-{number:03d}"
        path.touch(exist_ok=True)
        os.utime(path, (1000.0 + number, 1000.0 + number))
    seen = {criteokit.row_number(features["dense"]) // 5 for features, _ in followed(tmp_path).split("train")}
    assert seen == set(range(40 - 2 * SAMPLE_FILES + 1, 40, 2))  # the 16 newest with bytes, whatever the rest


def test_what_the_follow_loop_makes_of_each_kind_of_file(tmp_path):
    """Empty: whole (done at once); not Criteo, binary garbage, a corrupt gzip: unreadable (quarantined whole); a
    cut gzip or a missing last newline: unfinished (taken as it is once it stood still long enough)."""
    data = followed(tmp_path)
    good = criteokit.write(tmp_path / "good", criteokit.rows(20))
    zipped = gzip.compress(good.read_bytes())
    kinds = {"empty": b"", "README.md": b"# my click logs\n", "garbage": bytes(range(256)) * 40,
             "corrupt.gz": b"\x1f\x8b\x08\x00" + bytes(range(200)), "cut.gz": zipped[:len(zipped) // 2],
             "no_newline": good.read_bytes()[:-1], "good.gz": zipped, "malformed": good.read_bytes() + b"1\tx\n"}
    for name, content in kinds.items():
        (tmp_path / name).write_bytes(content)
    verdicts = {name: data.verdict(tmp_path / name) for name in kinds}
    assert {name: v.kind for name, v in verdicts.items()} == {
        "empty": WHOLE, "README.md": UNREADABLE, "garbage": UNREADABLE, "corrupt.gz": UNREADABLE,
        "cut.gz": UNFINISHED, "no_newline": UNFINISHED, "good.gz": WHOLE, "malformed": WHOLE}
    assert "is not Criteo data: its first line has 1 tab-separated fields" in verdicts["README.md"].why
    assert data.pieces("empty", 0) == [] and data.pieces("empty.gz", 0) == []
    flagged = list(data.flagged_examples(str(tmp_path / "malformed"), 0, (tmp_path / "malformed").stat().st_size))
    oks = [bool(ok) for _, _, ok, _ in flagged]
    assert oks == [True] * 20 + [False] and int(flagged[-1][3]) == good.stat().st_size  # its byte offset
    cut = [bool(ok) for _, _, ok, _ in data.flagged_examples(str(tmp_path / "cut.gz"), 0, -1)]
    assert 0 < len(cut) < 20 and all(cut[:-1])  # read as far as it goes, no error; a cut last line is malformed


def test_a_tfrecord_with_a_corrupted_record_cannot_be_read(tmp_path):
    import datakit
    from data import followed_for

    datakit.write_tfrecords(tmp_path, {"part": [4]}, size=(8, 8))
    [path] = tmp_path.glob("part-*")
    options = parse_training_options({"model": "mlp", "dataset": "tfrecord", "data_dir": str(tmp_path),
                                      "follow_data": True, "tfrecord_num_classes": 3, "image_size": [8, 8]})
    data = followed_for(options, tmp_path)
    assert data.verdict(path).kind == WHOLE
    content = bytearray(path.read_bytes())
    content[40] ^= 0xFF  # inside the first record's bytes: its CRC no longer matches
    path.write_bytes(bytes(content))
    verdict = data.verdict(path)
    assert verdict.kind == UNREADABLE and "corrupted record" in verdict.why


def test_a_piece_failure_is_told_apart_data_from_lost_task():
    import tensorflow as tf

    from online.follow.errors import piece_failure

    root = "/data/clicks"
    corrupt = piece_failure((3, 0), tf.errors.DataLossError(None, None, "corrupted record at 78"), root)
    assert corrupt.corrupt and corrupt.key == (3, 0) and "corrupted record at 78" in corrupt.why
    gone = piece_failure((3, 1), tf.errors.NotFoundError(None, None, f"{root}/day_3; No such file or directory"), root)
    assert gone is not None and not gone.corrupt
    cancelled = piece_failure((4, 0), tf.errors.CancelledError(
        None, None, "The corresponding function is cancelled. Please reschedule the function."), root)
    assert cancelled.cancelled
    running = tf.errors.CancelledError(None, None, "RemoteExecuteNode::RunAsync [Op:__inference_train_piece_5027]")
    assert piece_failure((4, 1), running, root) is None  # alone, a lost task's
    assert piece_failure((4, 1), running, root, cancelling=True).cancelled  # while a data failure's cancel runs
    assert piece_failure((4, 1), tf.errors.UnavailableError(None, None, "/job:worker/replica:0/task:1 unreachable"),
                         root, cancelling=True) is None
    ps_lost = tf.errors.NotFoundError(None, None, "Resource localhost/_AnonymousVar3/N10tensorflow3VarE does not "
                                      "exist.")
    assert piece_failure((5, 0), ps_lost, root) is None
    assert piece_failure((5, 0), tf.errors.UnavailableError(None, None, "/job:ps/replica:0/task:0 unreachable"),
                         root) is None


def test_tfrecord_files_are_followed_whole_and_decoded_like_the_fixed_source(tmp_path):
    import datakit
    from data import followed_for

    written = datakit.write_tfrecords(tmp_path, {"part": [5, 3]}, size=(8, 8))
    options = parse_training_options({"model": "mlp", "dataset": "tfrecord", "data_dir": str(tmp_path),
                                      "follow_data": True, "tfrecord_num_classes": 3, "image_size": [8, 8]})
    data = followed_for(options, tmp_path)
    landing = landing_for(data)
    landing.look(now=1.0)
    landed = landing.look(now=2.0).landed
    pieces = [piece for file in landed for piece in data.pieces(file.name, file.size)]
    assert [(p.name, p.whole) for p in pieces] == [("part-00000-of-00002", True), ("part-00001-of-00002", True)]
    images = [image.numpy() for piece in pieces for image, _ in data.piece_examples(piece)]
    assert [datakit.fingerprint(i) for i in images] == [datakit.fingerprint(i / 255) for i in written["part"]]
    assert data.input_shape == (8, 8, 3) and data.num_classes == 3


def test_a_piece_that_fails_for_its_data_comes_back_for_itself_and_a_lost_task_is_raised():
    import concurrent.futures

    import pytest
    import tensorflow as tf

    from online.follow.errors import DataFailure
    from online.follow.handout import PieceTrainer, Trained

    def done(result=None, error=None):
        future = concurrent.futures.Future()
        future.set_exception(error) if error is not None else future.set_result(result)
        return future

    trainer = PieceTrainer.__new__(PieceTrainer)  # its ClusterCoordinator is not needed to sort results
    trainer.data_root = "/data"
    cancelled = tf.errors.CancelledError(None, None, "The corresponding function is cancelled. Please reschedule.")
    trainer.abandoned = []
    trainer.running = {(0, 0): [done((8, 1, 1, {"loss": 0.5}, 2, [7, 3]))],
                       (1, 0): [done(error=tf.errors.DataLossError(None, None, "corrupted record at 78"))],
                       (2, 0): [done(error=cancelled)]}
    results = trainer.finished(0.0)
    assert results[0] == Trained((0, 0), 8, 1, 1, {"loss": 0.5}, 2, (3, 7))
    assert results[1:] == [DataFailure((1, 0), "cannot be read (corrupted record at 78)", corrupt=True),
                           DataFailure((2, 0), "cancelled", cancelled=True)] and trainer.running == {}
    lost = tf.errors.UnavailableError(None, None, "/job:ps/replica:0/task:1: connection refused")
    trainer.running = {(3, 0): [done(error=cancelled)], (4, 0): [done(error=lost)]}
    with pytest.raises(tf.errors.UnavailableError):  # the root cause, not the closure it cancelled
        trainer.finished(0.0)

    class Scheduling:
        def __init__(self, error):
            self.error = error

        def schedule(self, function, args):
            raise self.error

    trainer.running, trainer._train = {}, None
    trainer.coordinator = Scheduling(tf.errors.DataLossError(None, None, "corrupted record at 78"))
    assert trainer.hand_out((5, 0), "/data/day_5", 0, -1) is False and trainer.running == {}
    trainer.coordinator = Scheduling(lost)
    with pytest.raises(tf.errors.UnavailableError):
        trainer.hand_out((5, 0), "/data/day_5", 0, -1)
