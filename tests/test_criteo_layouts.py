"""Criteo as published: Kaggle's train.txt and the 1 TB set's day_N files split by the DLRM/MLPerf convention,
criteo_validation overrides, line counts estimated for large files, byte ranges that hold every line once."""

from __future__ import annotations

import pytest

import criteokit
from common.errors import UserError
from data import criteo, criteo_layout, line_ranges
from data.criteo_splits import criteo_files, lines_in


def _numbers(source, split: str) -> list[int]:
    return [criteokit.row_number(x["dense"]) for x, _ in source.split(split).as_numpy_iterator()]


def _source(root, validation=None, **settings):
    return criteo.load(criteo_files(root, validation), **settings)


@pytest.mark.parametrize("name", ["train.txt", "train.txt.gz"])
def test_kaggle_holds_out_the_last_seventh_halved(tmp_path, name):
    criteokit.write(tmp_path / name, criteokit.rows(700), gz=name.endswith(".gz"))
    (tmp_path / "test.txt").write_text("\t".join(["1"] * 39) + "\n")  # no labels: never read
    source = _source(tmp_path)
    splits = {split: _numbers(source, split) for split in ("train", "validation", "test")}
    trained = len(splits["train"])  # a plain file is cut by bytes at a line start: about 6/7 of the lines
    assert sorted(splits["train"]) == list(range(trained)) and abs(trained - 600) <= 3
    assert splits["validation"] + splits["test"] == list(range(trained, 700))
    assert abs(len(splits["validation"]) - len(splits["test"])) <= 3
    assert source.sizes == {split: len(found) for split, found in splits.items()}
    assert "DLRM reference's day 7 of 7" in source.note and "test.txt (no labels) is not read" in source.note


def test_terabyte_days_hold_out_the_last_day_or_what_is_asked(tmp_path):
    criteokit.write(tmp_path / "day_0", criteokit.rows(100))
    criteokit.write(tmp_path / "day_1.gz", criteokit.rows(100, first=100), gz=True)
    criteokit.write(tmp_path / "day_10", criteokit.rows(100, first=200))  # day 10 sorts after day 1 as a number
    default = _source(tmp_path)
    assert sorted(_numbers(default, "train")) == list(range(200))
    assert _numbers(default, "validation") + _numbers(default, "test") == list(range(200, 300))
    assert "day_10 (as MLPerf does)" in default.note
    gz_day = _source(tmp_path, (1,))
    assert _numbers(gz_day, "validation") == list(range(100, 150)) and _numbers(gz_day, "test") == list(range(150, 200))
    two = _source(tmp_path, (0, 10))
    assert _numbers(two, "validation") == list(range(100)) and sorted(_numbers(two, "train")) == list(range(100, 200))
    fraction = _source(tmp_path, 0.2)
    trained = len(_numbers(fraction, "train"))
    assert sorted(_numbers(fraction, "train")) == list(range(trained)) and abs(trained - 280) <= 2
    assert _numbers(fraction, "validation") + _numbers(fraction, "test") == list(range(trained, 300))


@pytest.mark.parametrize("files, validation, said", [
    ({"test.txt": 3}, None, "test.txt': has no labels, so it cannot train"),
    ({"train.txt": 3, "day_0": 3}, None, "holds more than one layout (train.txt, day_N)"),
    ({"day_3": 3, "day_3.gz": 3, "day_4": 3}, None, "is day 3 again"),
    ({"day_0": 3, "day_1": 3}, (5,), "criteo_validation = [5]: days [5] are not in"),
    ({"day_0": 3, "day_1": 3}, (0, 1), "holds out every day"),
    ({"day_0": 3}, None, "holds one day (day_0)"),
    ({"train.txt": 3}, (6,), "lists days, but train.txt is the Kaggle layout"),
    ({"train-0": 3, "validation-0": 3}, 0.1, "applies to train.txt or day_N files"),
    ({"readme.txt": 3}, None, "holds no Criteo click logs; give train.txt (Kaggle)"),
])
def test_layout_mistakes_are_one_line_each(tmp_path, files, validation, said):
    for name, rows in files.items():
        criteokit.write(tmp_path / name, criteokit.rows(rows), gz=name.endswith(".gz"))
    with pytest.raises(UserError) as raised:
        criteo_files(tmp_path, validation)
    assert said in str(raised.value) and len(str(raised.value).splitlines()) == 1


def test_large_files_are_estimated_not_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(criteo_layout, "EXACT_BYTES", 4096)
    criteokit.write(tmp_path / "train.txt", criteokit.rows(2000))
    files = criteo_files(tmp_path)
    estimated, exact = lines_in(files.parts["train"][0])
    assert not exact and abs(estimated - 2000 * 6 / 7) < 0.05 * 2000
    assert "estimated from file sizes" in criteo.load(files).note


@pytest.mark.parametrize("pieces", [1, 2, 3, 8, 40])
def test_byte_ranges_hold_every_line_once_across_files_and_chunks(tmp_path, pieces):
    criteokit.write(tmp_path / "a", criteokit.rows(13))
    (tmp_path / "b").write_bytes(criteokit.line(criteokit.rows(1, first=13)[0]).encode())  # no final newline
    ranges = tuple(line_ranges.ByteRange(str(p), 0, p.stat().st_size, p.stat().st_size)
                   for p in (tmp_path / "a", tmp_path / "b"))
    read = [line for piece in line_ranges.cut(ranges, pieces) for r in piece
            for _, _, line in line_ranges.read_lines(r.path, r.begin, r.end, chunk_bytes=61).as_numpy_iterator()]
    assert read == [criteokit.line(row).encode() for row in criteokit.rows(13) + criteokit.rows(1, first=13)]


def test_worker_shards_by_byte_range_cover_the_training_lines_once(tmp_path):
    criteokit.write(tmp_path / "train.txt", criteokit.rows(140))
    source = _source(tmp_path)
    assert source.sharding(3).startswith("sharded by byte range")
    import tensorflow as tf

    shards = [[criteokit.row_number(x["dense"]) for x, _ in
               source._worker_examples(3, tf.constant(k), seed=0).as_numpy_iterator()] for k in range(3)]
    assert sorted(sum(shards, [])) == list(range(source.sizes["train"])) and all(30 <= len(s) <= 50 for s in shards)
    elementwise = criteo.load(criteo_files(tmp_path), byte_ranges=False)
    assert elementwise.sharding(3).startswith("sharded by element")


def test_a_bad_line_in_a_byte_range_is_named_by_its_line_number(tmp_path):
    criteokit.write(tmp_path / "train.txt", criteokit.rows(20), extra_lines={9: "1\t2\t3"})
    with pytest.raises(UserError) as raised, criteo.malformed_lines_named():
        _numbers(_source(tmp_path), "train")
    assert f"{tmp_path / 'train.txt'}:9" in str(raised.value) and "has 3 tab-separated fields" in str(raised.value)
