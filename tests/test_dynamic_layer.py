"""Dynamic tables in one process: partitions (split locally), restores over other partition counts and sizes,
de-duplication, the mixing hash, and the exported forms (.h5, .keras, SavedModel) of a trained wide_deep."""

from __future__ import annotations

import contextlib
import functools

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from models import recommenders
from tables.dynamic.checkpoint import held_difference
from tables.dynamic.expiry import SWEEPS_PER_EXPIRY
from tables.dynamic.layer import DynamicTables
from tables.dynamic.mixing import partition_of
from tables.sparse import make_embedding_optimizer
from tables.streaming import checkpoint_io

SMALL_CHUNK = 300  # bytes: a few rows a chunk, so every restore here goes over several chunks


@contextlib.contextmanager
def rows_split(parts: int):
    """Splits a dynamic table's rows variable into `parts` local shards, as a partitioner does over ps."""
    def creator(next_creator, **kwargs):
        if kwargs.get("name") != "rows" or parts == 1:
            return next_creator(**kwargs)
        total, width = kwargs["shape"]
        sizes = [total // parts + (k < total % parts) for k in range(parts)]
        return tf.__internal__.distribute.ShardedVariable([next_creator(**{
            **kwargs, "name": f"rows/part_{k}", "shape": (n, width),
            "initial_value": lambda n=n: kwargs["initial_value"](partition_shape=(n, width))})
            for k, n in enumerate(sizes)])

    with tf.variable_creator_scope(creator):
        yield


def write(layer, optimizer, path, chunk_bytes: int = SMALL_CHUNK) -> str:
    return checkpoint_io.save(tf.train.Checkpoint(layer=layer, optimizer=optimizer), str(path),
                              chunk_bytes=chunk_bytes)


def read(layer, optimizer, path, chunk_bytes: int = SMALL_CHUNK) -> None:
    checkpoint_io.restore(tf.train.Checkpoint(layer=layer, optimizer=optimizer), path, chunk_bytes=chunk_bytes)


def table(capacity: int, parts: int, optimizer: str = "adagrad", **options) -> tuple[DynamicTables, object]:
    with rows_split(parts):
        layer = DynamicTables(capacity, 4, **options)
        layer.build(tf.TensorShape([None, 2]))
    optimizer = make_embedding_optimizer(optimizer, 0.1)
    optimizer._create_all_weights(layer.trainable_weights)
    layer.bind_optimizer(optimizer)
    return layer, optimizer


@functools.lru_cache(maxsize=None)
def _step(layer, optimizer):
    """A training step in a graph, as Keras and the cluster run it: every partition's lookup in one function."""
    @tf.function
    def step(ids):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(ids, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, layer.trainable_weights), layer.trainable_weights))

    return step


def train(layer, optimizer, ids) -> None:
    _step(layer, optimizer)(tf.constant(ids, tf.int64))


def test_ids_spread_over_partitions_and_come_back_over_other_counts_and_sizes(tmp_path):
    layer, optimizer = table(300, 3)
    batches = [np.arange(80, dtype=np.int64).reshape(-1, 2) + 1000 * k for k in range(3)]
    for batch in batches:
        train(layer, optimizer, batch)
    assert len(layer.partitions) == 3 and all(p.stats().numpy()[2] > 0 for p in layer.partitions)
    path = write(layer, optimizer, tmp_path / "ckpt")
    for parts in (2, 1):
        other, other_optimizer = table(300, parts)
        read(other, other_optimizer, path)
        assert held_difference(layer, other) == (240, 0.0)  # every id, with its row, slots and last step
        assert other.stats().numpy()[:, 3].sum() == 240  # the admitted count comes back
    small, small_optimizer = table(100, 1)  # fewer rows than ids: the most recently looked up are kept
    read(small, small_optimizer, path)
    kept = small.snapshot()["ids"]
    assert len(kept) == 100 and set(kept) <= set(batches[1].ravel()) | set(batches[2].ravel())
    assert set(batches[2].ravel()) <= set(kept) and small.stats().numpy()[0, 5] == 140  # left out: turned away


@pytest.mark.parametrize("deduplicate", [True, False])
def test_an_id_used_twice_in_a_batch_gets_one_row_and_both_gradients(deduplicate):
    layer, optimizer = table(64, 2, deduplicate=deduplicate)
    train(layer, optimizer, [[5, 6], [5, 7]])
    parts, rows = layer.locate([5, 6, 7])
    assert (rows >= 0).all() and len(set(zip(parts, rows))) == 3
    accumulators = layer.snapshot()["slot-accumulator"]  # sorted by id: 5, 6, 7
    np.testing.assert_allclose(accumulators[:, 0], [0.1 + 2.0 ** 2, 1.1, 1.1], rtol=1e-6)
    out = layer(tf.constant([[5, 6], [5, 7]], tf.int64), training=False).numpy()
    np.testing.assert_array_equal(out[0, 0], out[1, 0])


@pytest.mark.parametrize("deduplicate", [True, False])
def test_each_occurrence_trains_its_own_row_or_its_features_shared_row(deduplicate):
    layer, optimizer = table(64, 2, "sgd", admit_after=2, deduplicate=deduplicate)  # plain SGD, learning rate 0.1
    shared = layer.shared.numpy()
    train(layer, optimizer, [[5, 6], [5, 7], [5, 8]])  # 5 (feature 0) is seen 3 times: admitted; 6, 7, 8 are not
    np.testing.assert_allclose(layer.shared.numpy() - shared, [[0.0] * 4, [-0.3] * 4], atol=1e-6)
    assert (layer.locate([6, 7, 8])[1] < 0).all()
    first = layer.snapshot()["vectors"][0]
    train(layer, optimizer, [[5, 6], [9, 6]])  # 5 holds a row: its one occurrence trains it
    np.testing.assert_allclose(layer.snapshot()["vectors"][0] - first, [-0.1] * 4, atol=1e-6)


@pytest.mark.parametrize("name, slots", [("sgd", []), ("ftrl", ["accumulator", "linear"])])
def test_the_other_table_optimizers_train_reset_and_save_their_slots(tmp_path, name, slots):
    layer, optimizer = table(8, 2, name, expire_after_steps=1)
    train(layer, optimizer, [[1, 2], [3, 4]])
    assert sorted(k.removeprefix("slot-") for k in layer.snapshot() if k.startswith("slot-")) == slots
    for _ in range(3):  # each step sweeps after its lookups: ids 1 to 4 expire at step 2, their rows free at 3
        train(layer, optimizer, [[5, 6], [7, 8]])
    train(layer, optimizer, [[9, 10], [11, 12]])  # new ids in rows that were 1 to 4's, reset
    path = write(layer, optimizer, tmp_path / "ckpt")
    other, other_optimizer = table(8, 1, name, expire_after_steps=1)
    read(other, other_optimizer, path)
    assert held_difference(layer, other)[1] == 0.0 and layer.stats().numpy()[:, 4].sum() == 4


def test_the_partition_hash_spreads_sequential_ids_evenly():
    counts = np.bincount(partition_of(tf.range(90_000, dtype=tf.int64), 3).numpy(), minlength=3)
    assert counts.min() > 0.97 * 30_000 and counts.max() < 1.03 * 30_000


def test_wide_deep_exports_its_dynamic_rows_in_every_format_a_chunk_at_a_time(tmp_path):
    import exportkit

    options, source, model = exportkit.trained({
        "model": "wide_deep", "dataset": "synthetic_criteo", "table_rows": 300, "embedding_dim": 4, "top_mlp": [8],
        "embedding_kind": "dynamic", "embedding_capacity": 4000, "admit_after": 2, "learning_rate": 1e-2})
    expected, formats = exportkit.exported_and_loaded(options, source, model, tmp_path, chunk_bytes=4096)
    assert sorted(formats) == ["h5", "keras", "saved_model"]
    for name, predicted in formats.items():
        np.testing.assert_allclose(predicted, expected, atol=1e-6, err_msg=name)


def held_ids(layer) -> set[int]:
    return set(layer.snapshot()["ids"].tolist())


def test_expiry_stays_right_across_two_to_the_31_steps():
    layer, optimizer = table(64, 2, expire_after_steps=2)  # a sweep every step
    start = 2**31 - 3
    optimizer.iterations.assign(start)
    train(layer, optimizer, [[1, 2]])  # A at step 2^31 - 3
    held_after = []
    for _ in range(5):  # B at steps 2^31 - 2 to 2^31 + 2: A, idle, expires at the sweep of step 2^31
        train(layer, optimizer, [[3, 4]])
        held_after.append(sorted(held_ids(layer)))
    assert held_after == [[1, 2, 3, 4]] * 2 + [[3, 4]] * 3
    for _ in range(4):  # C at steps 2^31 + 3 to 2^31 + 6: B, idle since 2^31 + 2, expires at 2^31 + 5
        train(layer, optimizer, [[5, 6]])
    assert held_ids(layer) == {5, 6} and layer.stats().numpy()[:, 4].sum() == 4
    assert layer.snapshot()["last_seen"].tolist() == [start + 9] * 2  # int64 stamps past 2^31


def test_a_slow_workers_older_step_never_moves_a_stamp_back():
    layer, optimizer = table(64, 2)
    optimizer.iterations.assign(100)
    train(layer, optimizer, [[1, 2]])
    optimizer.iterations.assign(40)  # a step that read the counter long ago looks the same ids up now
    train(layer, optimizer, [[1, 2], [7, 8]])
    stamps = dict(zip(layer.snapshot()["ids"].tolist(), layer.snapshot()["last_seen"].tolist()))
    assert stamps == {1: 100, 2: 100, 7: 40, 8: 40}


def _as_before(state):
    """What the code before streamed checkpoints wrote for a table: the held ids and their rows concatenated,
    last steps as int32 (before steps became int64), 3 counters a partition."""
    partitions, held = state._layer.partitions, state._layer.snapshot()
    tensors = {"ids": tf.constant(held["ids"]), "last_seen": tf.constant(held["last_seen"].astype(np.int32)),
               "vectors": tf.constant(held["vectors"]),
               "counters": tf.stack([p.counters.read_value()[:3] for p in partitions])}
    for name in partitions[0].slots:
        tensors[f"slot-{name}"] = tf.constant(held[f"slot-{name}"])
    return tensors


def test_a_checkpoint_of_the_earlier_form_with_int32_last_steps_restores(tmp_path, monkeypatch):
    from tables.dynamic.checkpoint import TableState

    layer, optimizer = table(64, 2, admit_after=2)
    for _ in range(3):
        train(layer, optimizer, [[1, 2], [3, 4]])
    monkeypatch.setattr(TableState, "_serialize_to_tensors", _as_before)
    monkeypatch.delattr(TableState, "streamed_parts")
    path = write(layer, optimizer, tmp_path / "old")
    monkeypatch.undo()
    assert tf.train.load_checkpoint(path).get_variable_to_dtype_map()["layer/state/.ATTRIBUTES/last_seen"] == tf.int32
    other, other_optimizer = table(64, 3, admit_after=2)
    read(other, other_optimizer, path)
    assert held_difference(layer, other) == (4, 0.0)
    resaved = write(other, other_optimizer, tmp_path / "new")
    dtypes = tf.train.load_checkpoint(resaved).get_variable_to_dtype_map()
    assert dtypes["layer/state/.ATTRIBUTES/row_last_seen"] == tf.int64 and "layer/state/.ATTRIBUTES/ids" not in dtypes


def test_expiry_in_seconds_frees_a_row_idle_that_long_whatever_the_steps():
    """A's row goes no sooner than 0.6 s after its lookup, and by the first sweep 0.6 s after the first sweep that
    followed it. The bound comes from the steps' own times (the ps's clock is this clock), so a process the machine
    stalls for seconds still checks it: a stalled step only starts earlier than its sweep."""
    import time

    expire_s, sweep_s = 0.6, 0.6 / SWEEPS_PER_EXPIRY
    layer, optimizer = table(64, 2, expire_after_s=expire_s)
    a_began = time.time()  # tf.timestamp(), the ps's clock, is this wall clock
    train(layer, optimizer, [[1, 2]])
    a_ended = time.time()
    steps = []  # (began, ended) of each step of B, the last one the first without A's row
    while 1 in held_ids(layer) and time.time() < a_ended + 20:  # B steps as fast as they come
        began = time.time()
        train(layer, optimizer, [[3, 4]])
        steps.append((began, time.time()))
    assert held_ids(layer) == {3, 4} and steps[-1][1] - a_began >= expire_s, steps[-1][1] - a_began
    # by the end of a step begun a sweep after A, one of B's steps swept (none such: every step began too soon to hold
    # the row too long)
    swept_after_a_by = next((ended for began, ended in steps if began >= a_ended + sweep_s), float("inf"))
    last_holding = max([began for began, _ in steps[:-1]], default=a_ended)
    assert last_holding < swept_after_a_by + expire_s + sweep_s, (last_holding - a_ended, swept_after_a_by - a_ended)


@pytest.mark.parametrize("deduplicate", [True, False])
def test_an_update_for_a_row_that_changed_hands_meanwhile_is_dropped_and_counted(deduplicate):
    layer, optimizer = table(4, 1, expire_after_steps=1, deduplicate=deduplicate)  # 4 rows; a sweep every step
    weights = layer.trainable_weights

    @tf.function
    def gradients(ids):  # a slow worker's step: it looks up now and applies later
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(ids, training=True))
        return tape.gradient(loss, weights)

    a, b = [[1, 2], [3, 4]], [[5, 6], [7, 8]]
    train(layer, optimizer, a)  # step 0: A holds every row
    in_flight = gradients(tf.constant(a, tf.int64))  # looked up at step 1
    for _ in range(4):  # steps 1-4: B turned away while the table is full; A expires at step 3, B takes its rows
        train(layer, optimizer, b)
    before = layer.snapshot()
    assert before["ids"].tolist() == [5, 6, 7, 8] and layer.stats().numpy()[0, 6] == 0
    optimizer.apply_gradients(zip(in_flight, weights))  # A's update arrives: every row it targets is B's now
    after = layer.snapshot()
    assert all(np.array_equal(before[name], after[name]) for name in before)
    assert layer.stats().numpy()[0, 6] == 4  # counted as misdirected, not applied


POOLED = {"dense": tf.TensorSpec([2], tf.float32),
          "ids": tf.RaggedTensorSpec([3, None], tf.int64, ragged_rank=1, row_splits_dtype=tf.int64)}


def pooled_batches(count: int, seed: int = 0):
    """Batches of 8 examples whose 3 categorical features hold 0 to 3 ids each (negative ones and the values that
    once marked free rows included; never 0, the padding), with labels."""
    rng = np.random.default_rng(seed)
    vocabulary = np.array([-2, -1, -7, 3, 4, 5, 2**62, -(2**63)], np.int64)
    for _ in range(count):
        values = [rng.choice(vocabulary, size=rng.integers(0, 4)).tolist() for _ in range(8 * 3)]
        ids = tf.RaggedTensor.from_uniform_row_length(tf.ragged.constant(values, tf.int64, row_splits_dtype=tf.int64),
                                                      3)
        yield {"dense": tf.constant(rng.normal(size=(8, 2)), tf.float32), "ids": ids}, tf.constant(
            rng.integers(0, 2, size=(8, 1)), tf.float32)


@pytest.mark.parametrize("model_name", ["dlrm", "wide_deep"])
def test_pooled_features_train_checkpoint_resume_and_export_with_dynamic_tables(tmp_path, model_name):
    options = recommenders.RecommenderOptions(embedding_dim=4, bottom_mlp=(4,), top_mlp=(4,), embedding_kind="dynamic",
                                              embedding_capacity=64, expire_after_steps=50)

    def build():
        return recommenders.build_and_compile(model_name, options, tf_keras.optimizers.Adam(1e-2), features=POOLED)

    tf_keras.utils.set_random_seed(0)
    model = build()
    for features, labels in pooled_batches(6):
        model.train_on_batch(features, labels)
    [layer] = [layer for layer in model._flatten_layers() if isinstance(layer, DynamicTables)]
    assert set(layer.snapshot()["ids"].tolist()) == {-2, -1, -7, 3, 4, 5, 2**62, -(2**63)}  # not 0, the padding
    features = next(pooled_batches(1, seed=1))[0]
    expected = model(features, training=False).numpy()
    path = checkpoint_io.save(tf.train.Checkpoint(model=model), str(tmp_path / "ckpt"), chunk_bytes=SMALL_CHUNK)
    resumed = build()
    checkpoint_io.restore(tf.train.Checkpoint(model=resumed), path, chunk_bytes=SMALL_CHUNK)
    np.testing.assert_array_equal(resumed(features, training=False).numpy(), expected)
    resumed.train_on_batch(*next(pooled_batches(1, seed=2)))  # and it trains on
    import exportkit
    from tables.streaming.placeholders import table_placeholders

    with table_placeholders(SMALL_CHUNK) as placed:
        template = recommenders.build_for_serving(model_name, options, features=POOLED, compiled=False)
    for name, loaded in exportkit.formats_of(template, template, placed, path, tmp_path / "export",
                                             chunk_bytes=SMALL_CHUNK).items():
        np.testing.assert_allclose(loaded(features).numpy(), expected, atol=1e-6, err_msg=name)


def test_admission_by_window_counts_sightings_within_a_window_of_steps_whatever_the_batch():
    layer, optimizer = table(64, 1, admit_after=3, admit_window_steps=10, halve_by_load=False)  # a sketch 4096 wide
    for step in range(12):  # id 7 once a step among 2000 ids seen once: each lookup brings 4x width / 8 sightings
        junk = np.arange(2000, dtype=np.int64) + 1_000_000 * (step + 1)
        train(layer, optimizer, np.concatenate([[7], junk[:1999]]).reshape(-1, 2))
        if step == 1:
            assert 7 not in held_ids(layer)  # two sightings
        if step == 2:
            assert 7 in held_ids(layer)  # its third, within the window of steps 0-9
            break
    other, other_optimizer = table(64, 1, admit_after=2, admit_window_steps=2)  # windows: steps 0-1, 2-3, 4-5
    for batch in ([[8, 12]], [[12, 13]], [[8, 14]], [[15, 16]], [[8, 17]]):
        train(other, other_optimizer, batch)
    assert 12 in held_ids(other) and 8 not in held_ids(other)  # 12 twice in one window; 8 once in each of three


def test_admission_by_load_halves_when_new_ids_flood_in_so_ids_seen_once_stay_out():
    """Drifting clicks: every step brings more ids without a row than a quarter of the sketch's width. By window,
    their cells fill and nearly every id seen once passes admit_after 2; by load (the default) the counts halve as
    they come, and only an id seen twice close together is admitted."""
    admitted = {}
    for by_load in (True, False):
        layer, optimizer = table(64, 1, admit_after=2, admit_window_steps=100, halve_by_load=by_load)
        for step in range(8):  # 3000 ids seen once a step (4096 wide: a quarter is 1024), and id 5 twice a step
            junk = np.arange(2998, dtype=np.int64) + 1_000_000 * (step + 1)
            train(layer, optimizer, np.concatenate([[5, 5], junk]).reshape(-1, 2))
        admitted[by_load] = len(held_ids(layer) - {5}), 5 in held_ids(layer)
    assert admitted[True] == (0, True), admitted  # the frequent id only
    assert admitted[False][0] > 0, admitted  # ids seen once took rows


@pytest.mark.parametrize("options", [{}, {"admit_after": 2}, {"admit_after": 2, "expire_after_s": 60.0}])
def test_the_memory_account_is_the_partitions_own_variables(options):
    from cluster import dynamic_table_memory as memory

    layer, _ = table(6000, 2, **options)
    for partition in layer.partitions:
        held = sum(int(np.prod(v.shape)) * v.dtype.size for v in _bookkeeping_variables(partition))
        assert 0 <= partition.nbytes() - held <= memory.PARTITION_BYTES
        assert partition.nbytes() - memory.PARTITION_BYTES == partition.rows * memory.BOOKKEEPING_BYTES_PER_ROW + (
            max(4096, partition.rows) * 16 if options.get("admit_after", 1) > 1 else 0)


def _bookkeeping_variables(partition) -> list:
    """Every variable a partition holds beside its shard (and the optimizer's slots)."""
    found, stack = [], [vars(partition)]
    while stack:
        for value in stack.pop().values():
            if isinstance(value, tf.Variable) and value is not partition.shard:
                found.append(value)
            elif hasattr(value, "__dict__") and type(value).__module__.startswith("tables.dynamic"):
                stack.append(vars(value))
    return found
