"""The Criteo reader on small written files (fields, empty fields, gzip, sharding, bad lines) and synthetic_criteo."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

import criteokit
from data import criteo, synthetic_criteo
from data.criteo_layout import count_lines
from data.criteo_splits import criteo_files
from common.errors import UserError

def _source(root, **settings):
    return criteo.load(criteo_files(root), **settings)


def _examples(dataset) -> list[tuple[int, np.ndarray, np.ndarray, float]]:
    return [(criteokit.row_number(x["dense"]), x["dense"], x["ids"], float(y)) for x, y in dataset.as_numpy_iterator()]


@pytest.fixture
def layout(tmp_path):
    """Three training files (one gzipped), one validation file: rows 0-29 train, 100-109 validation."""
    written = {"train-0": criteokit.rows(10), "train-1.gz": criteokit.rows(12, first=10),
               "train-2": criteokit.rows(8, first=22), "validation-0": criteokit.rows(10, first=100)}
    for name, rows in written.items():
        criteokit.write(tmp_path / name, rows, gz=name.endswith(".gz"))
    return tmp_path, written


def test_fields_are_preprocessed_as_documented(layout):
    root, written = layout
    rows = {r[1][0]: r for name in ("train-0", "train-1.gz", "train-2") for r in written[name]}
    examples = _examples(_source(root).split("train"))
    assert sorted(e[0] for e in examples) == sorted(rows)
    for number, dense, ids, label in examples:
        row = rows[number]
        np.testing.assert_allclose(dense, criteokit.expected_dense(row), rtol=1e-6)
        assert label == row[0]
        assert all(0 <= i < 2 ** 62 for i in ids)  # 62-bit ids: the tables take them modulo their rows
    by_value = collections.defaultdict(set)  # the same value in the same column always hashes to the same id
    for number, _, ids, _ in examples:
        for column, value in enumerate(rows[number][2]):
            by_value[(column, value)].add(int(ids[column]))
    assert all(len(found) == 1 for found in by_value.values())


def test_empty_fields_read_as_zero_and_as_a_missing_category(tmp_path):
    empty = (0, [7] + [None] * 12, [None] * 26)
    criteokit.write(tmp_path / "train-0", [empty, empty])
    criteokit.write(tmp_path / "validation-0", [empty])
    (number, dense, ids, _), (_, _, ids_again, _) = _examples(_source(tmp_path).split("train"))
    assert number == 7 and not dense[1:].any()
    assert (ids == ids_again).all()


def test_gzip_and_plain_files_give_the_same_examples(tmp_path):
    rows = criteokit.rows(20)
    for name, gz in (("plain/train-0", False), ("plain/validation-0", False), ("gz/train-0.gz", True),
                     ("gz/validation-0.gz", True)):
        criteokit.write(tmp_path / name, rows, gz=gz)
    plain, gz = (_examples(_source(tmp_path / d).split("train")) for d in ("plain", "gz"))
    assert [(e[0], e[2].tolist()) for e in plain] == [(e[0], e[2].tolist()) for e in gz]
    assert count_lines(str(tmp_path / "gz/train-0.gz")) == 20


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_shards_are_disjoint_and_complete(layout, workers):
    """3 training files: by file for 2 and 3 workers, by element for 4."""
    root, _ = layout
    source = _source(root)
    shards = [[e[0] for e in _examples(source._worker_examples(workers, k, seed=0))] for k in range(workers)]
    assert sorted(sum(shards, [])) == list(range(30))
    assert all(shards)


def test_salt_moves_the_rows(layout):
    root, _ = layout
    ids = [np.stack([e[2] for e in _examples(_source(root, salt=salt).split("validation"))]) for salt in (0, 1)]
    assert (ids[0] != ids[1]).mean() > 0.5


@pytest.mark.parametrize("bad, said", [
    ("1\t2\t3", "has 3 tab-separated fields"),
    ("0\t" + "\t".join(["1"] * 5 + ["x1"] + ["2"] * 7) + "\t" + "\t".join(["0a"] * 26), "I6 is 'x1'"),
    ("1\t" + "\t".join(["1"] * 13) + "\t" + "\t".join(["0a"] * 25 + ["zz"]), "C26 is 'zz'"),
])
def test_a_bad_line_stops_the_run_naming_file_and_line(tmp_path, bad, said):
    criteokit.write(tmp_path / "train-0.gz", criteokit.rows(6), gz=True, extra_lines={4: bad})
    criteokit.write(tmp_path / "validation-0", criteokit.rows(3))
    with pytest.raises(UserError) as raised, criteo.malformed_lines_named():
        _examples(_source(tmp_path).split("train"))
    message = str(raised.value)
    assert f"{tmp_path / 'train-0.gz'}:4" in message and said in message and "skip_corrupt" in message
    assert len(message.splitlines()) == 1


def test_skip_corrupt_drops_and_counts_bad_lines(tmp_path, capfd):
    criteokit.write(tmp_path / "train-0", criteokit.rows(6), extra_lines={2: "garbage", 5: "1\tx"})
    criteokit.write(tmp_path / "validation-0", criteokit.rows(3))
    from data import skipped

    skipped.taken_here()
    examples = _examples(_source(tmp_path, skip_corrupt=True).split("train"))
    assert sorted(e[0] for e in examples) == list(range(6))
    assert "skipped 2 malformed Criteo line(s)" in capfd.readouterr().err
    assert skipped.taken_here() == 2 and skipped.taken_here() == 0  # counted for the summary, taken once


def test_layout_names_what_is_missing_or_not_criteo(tmp_path):
    criteokit.write(tmp_path / "train-0", criteokit.rows(3))
    with pytest.raises(UserError, match="has no validation-\\* files"):
        criteo_files(tmp_path)
    (tmp_path / "validation-0").write_text("a,b,c\n")
    with pytest.raises(UserError, match="validation-0:1"):
        criteo_files(tmp_path)
    criteokit.write(tmp_path / "validation-0", criteokit.rows(2))
    assert [part.path for part in criteo_files(tmp_path).parts["test"]] == [str(tmp_path / "validation-0")]


def test_synthetic_criteo_is_deterministic_zipf_and_spread():
    rows = (1000,) * 26
    first, again = (next(iter(synthetic_criteo.load(rows, seed=3).split("train").batch(4096))) for _ in range(2))
    np.testing.assert_array_equal(first[0]["ids"].numpy(), again[0]["ids"].numpy())
    ids = first[0]["ids"].numpy()
    assert ids.min() >= 0 and ids.max() < 2**62 and ids.max() > 2**50  # 62-bit ids, as Criteo's hashing gives
    assert all(len(np.unique(ids[:, k])) <= 1000 for k in range(26))  # the vocabulary of each feature
    assert not set(ids[:, 0]) & set(ids[:, 1])  # keyed by feature: two features never share an id
    _, counts = np.unique(ids[:, 0], return_counts=True)
    assert np.sort(counts)[-1] > 20 * np.median(counts)  # a power law: the hottest id far above the typical one
    assert 0.3 < (ids % 1000 < 500).mean() < 0.7  # hot ids land anywhere in a hashed table
    assert 0.1 < float(tf.reduce_mean(first[1])) < 0.5


def test_synthetic_criteo_ids_are_born_and_die_in_order():
    drift = synthetic_criteo.Drift(new_ids=100, id_lifetime=4, period_examples=4096)
    source = synthetic_criteo.load((1000,) * 26, seed=3, train_examples=8 * 4096, drift=drift)
    periods = [set(batch[0]["ids"].numpy()[:, 0]) for batch in source.split("train").batch(4096)]
    assert len(periods) == 8 and all(380 <= len(ids) <= 400 for ids in periods)  # 100 x 4 alive at a time
    assert all(len(periods[k] & periods[k + 1]) >= 280 for k in range(7))  # 3 of 4 cohorts live on
    assert not periods[0] & periods[4]  # after 4 periods every id of the first has died
    validation = set(next(iter(source.split("validation").batch(4096)))[0]["ids"].numpy()[:, 0])
    assert len(validation & periods[-1]) >= 380 and not validation & periods[0]  # the last period's ids
    assert source.in_order and "100 new per feature every 4096 examples" in source.note
