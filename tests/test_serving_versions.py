"""Serving versions on disk: increasing integers, written under a hidden name and renamed, the newest kept."""

from __future__ import annotations

import json

from online.publish.versions import EXTRA, TRAINED_THROUGH, ServingVersions


def write_one(versions: ServingVersions) -> int:
    number = versions.next_number()
    extra = versions.writing(number) / EXTRA
    extra.mkdir(parents=True)
    (extra / TRAINED_THROUGH).write_text(json.dumps({"version": number, "optimizer_step": 10 * number}))
    versions.publish(number)
    return number


def test_versions_increase_past_pruned_ones_and_a_half_written_one_is_cleared(tmp_path):
    (tmp_path / ".writing-9").mkdir(parents=True)  # a write that died midway
    versions = ServingVersions(tmp_path, keep=2)
    assert not (tmp_path / ".writing-9").exists()
    assert versions.newest_trained_through() is None
    numbers = [write_one(versions) for _ in range(3)]
    assert (numbers, versions.versions()) == ([1, 2, 3], [2, 3])  # the oldest pruned
    assert versions.newest_trained_through() == {"version": 3, "optimizer_step": 30}
    assert write_one(versions) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["3", "4"]


def _bundle(prefix: str) -> None:
    for suffix in (".index", ".data-00000-of-00001"):
        open(prefix + suffix, "w").close()


def test_checkpoints_for_serving_keep_the_newest_published_and_go_when_dropped(tmp_path):
    from online.follow.for_serving import ForServing

    (tmp_path / "for-serving" / "ckpt-0-7_temp").mkdir(parents=True)  # an earlier run's, half written
    _bundle(str(tmp_path / "ckpt-0-5"))  # a settled checkpoint: never touched
    aside = ForServing(tmp_path)
    assert not (tmp_path / "for-serving").exists()
    first, second, third = (aside.prefix(f"ckpt-0-{n}") for n in (10, 20, 30))
    for prefix in (first, second, third):
        _bundle(prefix)
    assert aside.name("ckpt-0-20") == "for-serving/ckpt-0-20" and aside.holds(second)
    aside.published(second)  # its version is out: the others go
    assert sorted(p.name for p in (tmp_path / "for-serving").iterdir()) == [
        "ckpt-0-20.data-00000-of-00001", "ckpt-0-20.index"]
    aside.dropped(str(tmp_path / "ckpt-0-5"))  # not one of its own: stays
    aside.dropped(second)
    assert list((tmp_path / "for-serving").iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-0-5.data-00000-of-00001", "ckpt-0-5.index",
                                                          "for-serving"]


def test_rows_read_from_a_bundle_are_the_rows_asked_whatever_chunks_they_fall_in(tmp_path):
    """The export check's and the evaluator's reads: scattered rows and runs, across the slices a table was stored in
    and the windows they are read in, come back as numpy takes them."""
    import numpy as np
    import tensorflow as tf

    from tables.bundle_rows import read_rows
    from tables.streaming.bundle import BundleReader, BundleWriter
    from tables.streaming.rows import slice_spec

    table = np.random.default_rng(0).random([1000, 4], dtype=np.float32)
    writer = BundleWriter(str(tmp_path / "bundle"))
    for begin, end in ((0, 300), (300, 700), (700, 1000)):  # stored as three slices
        writer.add("table", tf.constant(table[begin:end]), slice_spec([1000, 4], begin, end))
    reader = BundleReader(writer.finish())
    wanted = np.array([0, 1, 2, 5, 299, 300, 301, 650, 699, 700, 998, 999], np.int64)
    for chunk_bytes in (16, 16 * 100, 16 * 1000):  # a row, 100 rows and the whole table a window
        assert np.array_equal(read_rows(reader, "table", wanted, chunk_bytes).numpy(), table[wanted])
    assert read_rows(reader, "table", np.array([], np.int64)).shape == [0, 4]


def test_a_checkpoint_to_serve_from_holds_the_tables_rows_without_their_optimizer_slots(tmp_path):
    """Half the bytes of a version's own checkpoint with Adagrad: the rows a version reads, not the slots only a
    resume needs, whichever optimizer keeps them (the tables' own TF1-style one, or the Keras one under
    `optimizer/`); small values keep theirs (a few bytes)."""
    import numpy as np
    import tensorflow as tf
    import tf_keras

    from models.checkpoints import not_a_slot
    from tables.streaming import checkpoint_io
    from tables.streaming.bundle import BundleReader

    hashed, own = tf.Variable(tf.random.uniform([512, 8])), tf.Variable(tf.random.uniform([512, 8]))  # 16 KB each
    dense = tf.Variable(tf.ones([4]))
    tables_optimizer, optimizer = tf_keras.optimizers.legacy.Adagrad(0.1), tf_keras.optimizers.Adagrad(0.1)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(hashed, [3, 7])) + tf.reduce_sum(tf.gather(own, [1])) + tf.reduce_sum(dense)
    gradients = tape.gradient(loss, [hashed, own, dense])
    tables_optimizer.apply_gradients([(gradients[0], hashed)])
    optimizer.apply_gradients(zip(gradients[1:], [own, dense]))
    model = tf.train.Checkpoint(hashed=hashed, own=own, dense=dense, embedding_optimizer=tables_optimizer)
    root = tf.train.Checkpoint(model=model, optimizer=optimizer)
    chunk = 8 << 10  # a variable over 2 KB is a table
    every = BundleReader(checkpoint_io.save(root, str(tmp_path / "resume"), chunk_bytes=chunk))
    serving = BundleReader(checkpoint_io.save(root, str(tmp_path / "serve"), chunk_bytes=chunk, tables=not_a_slot))

    rows = {f"model/{name}/.ATTRIBUTES/VARIABLE_VALUE": table for name, table in (("hashed", hashed), ("own", own))}
    slots = {key for key, shape in every.shapes.items() if shape == [512, 8]} - set(rows)
    assert len(slots) == 2, sorted(every.shapes)  # one per table, one optimizer each
    assert set(serving.shapes) == set(every.shapes) - slots
    for key, table in rows.items():
        assert np.array_equal(serving.whole(key).numpy(), table.numpy())
