"""Follow mode's data side: which files are data, when a file counts as landed, its pieces and their examples."""

from __future__ import annotations

import gzip
import os
import time

import pytest

import criteokit
from cluster.training_options import parse_training_options
from common.errors import UserError
from coordinator.follow.landing import Landing, landing_for
from data.folder import natural_key
from data.pieces import cut_into_pieces
from data.whole_files import gzip_missing, text_missing, tfrecord_missing


def whole(path):
    return None


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


def test_a_growing_file_waits_and_a_taken_file_that_changes_is_reported_once(tmp_path):
    path = tmp_path / "part-0"
    path.write_text("a\n")
    landing = Landing(tmp_path, "*", text_missing, taken={})
    landing.look(now=1.0)
    with open(path, "a") as handle:
        handle.write("b\nc")  # a writer in the middle of a line
    look = landing.look(now=2.0)
    assert look.landed == [] and "still growing" in look.incomplete["part-0"]
    look = landing.look(now=3.0)
    assert look.landed == [] and "no newline" in look.incomplete["part-0"]
    with open(path, "a") as handle:
        handle.write("\n")
    landing.look(now=4.0)
    assert names(landing.look(now=5.0)) == ["part-0"]
    os.utime(path, (10.0, 10.0))
    assert landing.look(now=6.0).changed == ["part-0"]
    assert landing.look(now=7.0).changed == []


def test_resumed_runs_skip_the_files_they_took(tmp_path):
    (tmp_path / "a").write_text("1\n")
    (tmp_path / "b").write_text("2\n")
    stat = (tmp_path / "a").stat()
    landing = Landing(tmp_path, "*", whole, taken={"a": (stat.st_size, stat.st_mtime)})
    landing.look(now=1.0)
    assert names(landing.look(now=2.0)) == ["b"]


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


def test_a_file_that_is_not_criteo_stops_the_run_naming_it(tmp_path):
    (tmp_path / "README.md").write_text("# my click logs\n")
    landing = landing_for(followed(tmp_path))
    landing.look(now=1.0)
    with pytest.raises(UserError) as raised:
        landing.look(now=2.0)
    assert "README.md" in str(raised.value) and "follow_pattern" in str(raised.value)
    assert len(str(raised.value).splitlines()) == 1


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
