"""Serving deltas in one process: a model trained here with its rows tracked, a base checkpoint, deltas written between
steps; base plus every delta equals the live tables bit for bit (rows, slots, ids, held flags, last steps and
stamps), and a version written from the base, with the deltas applied by the follower, predicts as a version
written at the end; a checkpoint restores. Hashed and dynamic tables (rows expiring and given to new ids), and the
tests' own plain kind (tables/plain.py: the seam's proof); a write that fails midway."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import subprocess

import numpy as np
import pytest
import tensorflow as tf

import deltakit
from rest_standin import RestStandIn
from cluster import dynamic_table_options
from cluster.config import PROJECT_ROOT
from cluster.training_parse import parse_training_options
from models import export
from tables.changed_rows import step_clock
from tables import kinds
from tables.kinds import track_changes
from tables.plain import PlainKind
from models.compiled import build_compiled
from online.publish import delta_format as names
from online.publish.deltas import DeltaFiles, DeltaSource, write_delta
from online.publish.exporter import export_checkpoint
from online.publish.follower import Follower
from online.publish.request import VERSION, ExportRequest
from tables.streaming import checkpoint_io
from tables.streaming.entries import variable_keys
from data import source_for

LOG = logging.getLogger("test_deltas")
CHUNK = 4096  # bytes: several chunks per shard
TRAINING = {"model": "dlrm", "dataset": "synthetic_criteo", "table_rows": 300, "embedding_dim": 4, "top_mlp": [8],
            "bottom_mlp": [8], "stream_chunk_mb": CHUNK / (1 << 20)}
KINDS = {"hashed": {"embedding_kind": "hashed"},
         "dynamic": {"embedding_kind": "dynamic", "embedding_capacity": 6000, "expire_after_steps": 2},
         "plain": {"embedding_kind": "plain"}}  # a kind of the tests' own (tables/plain.py), registered below


@pytest.fixture(scope="module", autouse=True)
def plain_kind():
    """The plain kind registered as a new kind is: its line in tables/kinds.py's KINDS and its name among those
    cluster.json takes."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(kinds.KINDS, PlainKind.name, PlainKind())
        patch.setattr(dynamic_table_options, "EMBEDDING_KINDS", (*dynamic_table_options.EMBEDDING_KINDS,
                                                                 PlainKind.name))
        yield


@dataclasses.dataclass
class Run:
    options: object
    source: object
    model: object
    tracked: list
    serving: object
    base: str
    from_step: int
    base_predictions: tuple  # raw reference inputs, the model's predictions on them at the base


def _predictions(model, source) -> tuple:
    raw = export.reference_inputs(source.split("test", raw=True), count=64)
    return raw, model(export.model_inputs(source, raw), training=False).numpy()


def _checkpoint(model, path) -> str:
    return checkpoint_io.save(tf.train.Checkpoint(model=model, optimizer=model.optimizer), str(path),
                              chunk_bytes=CHUNK)


def _clock_at(model, checkpoint: str) -> int:
    key = variable_keys(tf.train.Checkpoint(model=model, optimizer=model.optimizer))[step_clock(model).ref()]
    return int(tf.train.load_variable(checkpoint, key))


@pytest.fixture(scope="module", params=list(KINDS))
def run(request, tmp_path_factory):
    """A model trained 4 steps (the base checkpoint; the stamp clocks advanced after the third), then 3 deltas of 3
    steps each."""
    tmp = tmp_path_factory.mktemp(request.param)
    options = parse_training_options({**TRAINING, **KINDS[request.param]})
    source = source_for(options, PROJECT_ROOT)
    tf.keras.utils.set_random_seed(0)
    model = build_compiled(options, source)
    tracked = track_changes(model)
    batches = source.train_dataset_fn(64, 0)(tf.distribute.InputContext())
    delta_source, files = DeltaSource(model, tracked), DeltaFiles(tmp / "serving")
    model.fit(batches.take(3), epochs=1, verbose=0)
    delta_source.advance()
    model.fit(batches.skip(3).take(1), epochs=1, verbose=0)
    base = _checkpoint(model, tmp / "ckpt-base")
    from_step = first = delta_source.watermark_before(_clock_at(model, base))
    assert first == 3
    at_base = _predictions(model, source)
    for sequence in (1, 2, 3):
        model.fit(batches.skip(4 * sequence).take(3), epochs=1, verbose=0)
        written = write_delta(delta_source, files, version=1, sequence=sequence, from_step=from_step,
                              chunk_bytes=CHUNK, settle_s=0)
        from_step = written.read_step
    return Run(options, source, model, tracked, tmp / "serving", base, first, at_base)


def test_base_plus_every_delta_equals_the_live_tables_bit_for_bit(run):
    live = deltakit.live_tables(run.model, run.tracked)
    deltas = deltakit.deltas_on_disk(run.serving, 1)
    assert [manifest["sequence"] for manifest, _ in deltas] == [1, 2, 3]
    replayed = deltakit.replayed(deltakit.base_tables(run.base, {t: list(f) for t, f in live.items()}), deltas)
    assert deltakit.differences(live, replayed) == []
    for table, fields in live.items():
        in_no_delta = replayed[table][names.CHANGED_AT] < 0
        assert (fields[names.CHANGED_AT][in_no_delta] < run.from_step).all()  # unchanged since the base
        if run.options.embedding_kind != "dynamic":
            assert (fields[names.CHANGED_AT] == -1).any()  # rows never changed keep no stamp
        for _, arrays in deltas:  # a delta holds, for every row it names, each field (slots too): key sets agree
            counts = {len(arrays[names.field_key(table, field)]) for field in fields}
            assert len(counts) == 1
        rows = [len(arrays[names.field_key(table, names.ROWS)]) for _, arrays in deltas]
        assert 0 < max(rows) < len(fields[names.ROWS])  # the rows changed, not the table


def test_a_checkpoint_restores_into_a_model_built_anew(run, tmp_path):
    """Every value comes back (a dynamic table's ids may take other rows: its predictions are compared)."""
    path = _checkpoint(run.model, tmp_path / "ckpt-now")
    tf.keras.utils.set_random_seed(1)
    again = build_compiled(run.options, run.source)
    checkpoint_io.restore(tf.train.Checkpoint(model=again, optimizer=again.optimizer), path, chunk_bytes=CHUNK)
    np.testing.assert_array_equal(_predictions(again, run.source)[1], _predictions(run.model, run.source)[1])
    if not any(table.restore_moves_rows for table in run.tracked):
        for mine, restored in zip(run.model.weights, again.weights, strict=True):
            np.testing.assert_array_equal(mine.numpy(), restored.numpy(), err_msg=mine.name)
        optimizer, restored = run.model.embedding_optimizer, again.embedding_optimizer
        for mine, theirs in zip(optimizer.variables(), restored.variables(), strict=True):
            np.testing.assert_array_equal(mine.numpy(), theirs.numpy(), err_msg=mine.name)


@pytest.mark.parametrize("run", ["dynamic"], indirect=True)  # ids expire from dynamic tables only
def test_expired_ids_leave_and_new_ones_come(run):
    live = deltakit.live_tables(run.model, run.tracked)
    base = deltakit.base_tables(run.base, {t: list(f) for t, f in live.items()})
    (table,) = live
    held_then = set(base[table][names.IDS][base[table][names.HELD]].tolist())
    held_now = set(live[table][names.IDS][live[table][names.HELD]].tolist())
    assert held_then - held_now and held_now - held_then  # ids expired, new ones admitted
    _, last = deltakit.deltas_on_disk(run.serving, 1)[-1]
    held = last[names.field_key(table, names.HELD)]
    assert not held.all()  # freed rows travel as rows held by no id


def _version(run, checkpoint: str, serving, number: int, from_step: int, predictions: tuple, **through) -> None:
    """Version `number` of `checkpoint` in `serving`, checked against `predictions` (raw inputs, predictions); its
    trained_through.json holds `through` too."""
    raw, expected = predictions
    reference = serving.parent / f"reference-{number}.npz"
    serving.mkdir(parents=True, exist_ok=True)
    np.savez(reference, predictions=expected, **export.saved_inputs(raw))
    result = export_checkpoint(ExportRequest(
        kind=VERSION, checkpoint=checkpoint, destination=str(serving), options=dataclasses.asdict(run.options),
        reference=str(reference), version=number, keep=3, delta_from_step=from_step,
        trained_through={"version": number, **through}), LOG)
    assert not result.error, result


def test_a_follower_on_the_base_version_and_its_deltas_predicts_as_a_version_written_now(run, tmp_path):
    now_predictions = _predictions(run.model, run.source)
    _version(run, _checkpoint(run.model, tmp_path / "ckpt-now"), tmp_path / "now", 1, 0, now_predictions)
    _version(run, run.base, run.serving, 1, run.from_step, run.base_predictions)
    follower = Follower(run.serving, log=LOG.info)
    assert follower.catch_up() and follower.sequence == 3
    assert not follower.catch_up()  # nothing new: idempotent
    inputs = {key.removeprefix("inputs_"): tf.constant(value) for key, value in
              np.load(tmp_path / "now" / "1" / "assets.extra" / "reference_predictions.npz").items()
              if key != "predictions"}
    followed = next(iter(follower.predict(**inputs).values())).numpy()
    now = next(iter(tf.saved_model.load(str(tmp_path / "now" / "1")).signatures["serving_default"](
        **inputs).values())).numpy()
    np.testing.assert_allclose(followed, now, atol=1e-6)
    np.testing.assert_allclose(followed.reshape(-1), now_predictions[1].reshape(-1), atol=1e-5)


@pytest.mark.parametrize("run", ["hashed"], indirect=True)
def test_rows_kept_whole_or_written_a_range_at_a_time_make_the_same_delta(run, tmp_path, monkeypatch):
    """A table whose changed rows outgrow a chunk is written in slices, a counted range at a time, each row once (no
    scratch bundle): the same delta, key by key, as when they fit a chunk and are written whole."""
    from online.publish import delta_bundle, delta_ranges

    ranged, kept = [], []
    monkeypatch.setattr(delta_ranges, "write_range_here", spy(delta_ranges.write_range_here, ranged))
    monkeypatch.setattr(delta_bundle, "_write_kept", spy(delta_bundle._write_kept, kept))
    source, bundles = DeltaSource(run.model, run.tracked), []
    for chunk_bytes in (CHUNK, 64 << 20):  # its rows outgrow 4 KiB (85 rows), not 64 MiB
        written = write_delta(source, DeltaFiles(tmp_path / str(chunk_bytes)), version=1, sequence=1,
                              from_step=run.from_step, chunk_bytes=chunk_bytes, settle_s=0)
        reader = tf.train.load_checkpoint(str(written.path / names.BUNDLE))
        bundles.append({key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()})
        assert {path.name.partition(".")[0] for path in written.path.iterdir()} == {names.BUNDLE, "manifest"}
    tables = len(source.tables)
    ranged_tables = {args[1].table.name for args in ranged}
    assert len(ranged) > len(ranged_tables) >= 1  # the first write: several ranges of a table, written as slices
    assert len(kept) == 2 * tables - len(ranged_tables)
    assert bundles[0].keys() == bundles[1].keys()
    for key, value in bundles[0].items():
        np.testing.assert_array_equal(value, bundles[1][key], err_msg=key)


def spy(function, calls: list):
    def called(*args):
        calls.append(args)
        return function(*args)
    return called


def test_a_delta_that_fails_midway_leaves_nothing_visible(run, monkeypatch):
    from online.publish import delta_bundle

    files = DeltaFiles(run.serving)
    before = files.listed()

    def broken(*args, **kwargs):
        raise OSError("disk full (made up)")

    monkeypatch.setattr(delta_bundle.BundleWriter, "finish", broken)
    with pytest.raises(OSError):
        write_delta(DeltaSource(run.model, run.tracked), files, version=1, sequence=4, from_step=0,
                    chunk_bytes=CHUNK, settle_s=0)
    assert files.listed() == before and not list(files.directory.glob(names.WRITING_PREFIX + "*"))
    (files.directory / (names.WRITING_PREFIX + "1.9")).mkdir()  # a chief killed while writing one
    assert not list(DeltaFiles(run.serving).directory.glob(names.WRITING_PREFIX + "*"))


def test_a_served_dynamic_table_keeps_its_index_right_through_frees_moves_and_stale_rows():
    from tables.dynamic.exported import ServingTables
    from tables.dynamic.served import apply_rows, last_of_each

    layer = ServingTables(6, 2)
    layer.build(tf.TensorShape([None, 1]))
    layer.ids.assign([10, 11, 12, 0, 0, 0])
    layer.held.assign([True, True, True, False, False, False])
    layer.vectors.assign(tf.reshape(tf.range(12, dtype=tf.float32), [6, 2]))

    def apply(rows, held, ids):
        vectors = tf.constant([[100.0 + row, 0.0] for row in rows])
        apply_rows(layer, tf.constant(rows, tf.int64), tf.constant(held), tf.constant(ids, tf.int64), vectors)

    def where(*ids):
        return layer.index.lookup(tf.constant(ids, tf.int64)).numpy().tolist()

    apply([1, 3], [False, True], [11, 13])  # 11 expired (row 1 free), 13 admitted into row 3
    assert where(10, 11, 12, 13) == [0, -1, 2, 3]
    apply([0, 2, 4, 5], [True, True, True, True], [14, 12, 10, 12])  # 10 moved to row 4; row 2 read before 12 moved
    assert where(10, 12, 14) == [4, 5, 0]  # the later row of 12 wins
    apply([2], [False], [12])  # row 2 freed: 12 is not there (the index says row 5), so it stays
    assert where(12) == [5] and layer.held.numpy().tolist() == [True, False, False, True, True, True]
    distinct, rows = last_of_each(tf.constant([7, 8, 7, 9, 8], tf.int64), tf.constant([0, 1, 2, 3, 4], tf.int64))
    assert dict(zip(distinct.numpy().tolist(), rows.numpy().tolist())) == {7: 2, 8: 4, 9: 3}


def test_reads_cover_every_block_with_changed_rows_merged_within_a_chunk():
    from tables.changed_rows import merged_ranges

    assert merged_ranges([0, 0, 0], 10, 25) == []
    assert merged_ranges([3, 0, 4], 10, 25) == [(0, 25)]  # one read across an unchanged block
    assert merged_ranges([0, 6, 5, 0], 10, 35) == [(10, 20), (20, 30)]  # 11 changed rows: two reads
    assert merged_ranges([10, 0, 0, 1], 10, 31) == [(0, 10), (30, 31)]
    assert merged_ranges([0, 0, 0, 1], 10, 31) == [(30, 31)]


def test_delta_names_are_short_structural_and_refuse_a_clash():
    table = "model/layer_with_weights-1/table/.ATTRIBUTES/VARIABLE_VALUE"
    assert names.short_name(table) == "layer_with_weights_1_table"
    assert names.short_name("model/layer_with_weights-2/state/.ATTRIBUTES/row_ids") == "layer_with_weights_2_state"
    assert names.field_key(names.short_name("model/x/.ATTRIBUTES/VARIABLE_VALUE"), names.ROWS) == "x__rows"
    assert names.parse_delta_name("7.12") == (7, 12) and names.parse_delta_name(".writing-7.12") is None
    with pytest.raises(ValueError, match="two weights"):
        names.unique_names(["model/a-b/.ATTRIBUTES/VARIABLE_VALUE", "model/a_b/.ATTRIBUTES/VARIABLE_VALUE"])


def test_a_tensorflow_serving_replica_is_fed_the_same_deltas_through_its_predict_api(run, tmp_path):
    from online.publish.follower import replicas

    if not (run.serving / "1").exists():
        _version(run, run.base, run.serving, 1, run.from_step, run.base_predictions)
    replica = RestStandIn(run.serving, 1)
    try:
        replicas([replica.base], run.serving, log=LOG.info)[0].catch_up()
        replicas([replica.base], run.serving, log=LOG.info)[0].catch_up()  # again: nothing more to send
        through = replica.model.signatures["applied_through"]()
        assert (int(through["version"]), int(through["sequence"])) == (1, 3)
        served, step, said = _laid_out(run, tmp_path / "serving", deltas=3), int(through["read_step"]), []
        _relabeled(served, 3, 1, 4, step + 1, step + 9)  # a delta of another chain
        (feeding,) = replicas([replica.base], served, log=said.append)
        feeding.catch_up()
        feeding.catch_up()  # said once
        assert said == [f"[follower] {replica.base}: version 1: delta 1.4 starts at step {step + 1} but the model "
                        f"holds through step {step} (version 1, delta 3): a delta is missing or of another chain; "
                        "not sent"]
        assert int(replica.model.signatures["applied_through"]()["sequence"]) == 3
        follower = Follower(run.serving, log=LOG.info)
        follower.catch_up()
        raw, _ = run.base_predictions
        inputs = {key.removeprefix("inputs_"): tf.constant(value) for key, value in export.saved_inputs(raw).items()}
        fed = next(iter(replica.model.signatures["serving_default"](**inputs).values())).numpy()
        np.testing.assert_array_equal(fed, next(iter(follower.predict(**inputs).values())).numpy())
    finally:
        replica.close()


@pytest.mark.parametrize("run", ["hashed"], indirect=True)
def test_a_copied_follower_feeds_a_replica_with_replica_py_beside_it_and_says_so_without(run, tmp_path):
    """follower.py copied alone refuses `--rest` in one line; with replica.py beside it, the replica gets every
    delta (the first three went through this process's Replica above or not: this one starts on a fresh copy)."""
    from clusterkit import PYTHON, ROOT

    served, alone = _laid_out(run, tmp_path / "serving", deltas=3), tmp_path / "alone"
    alone.mkdir()
    shutil.copy(ROOT / "online" / "publish" / "follower.py", alone / "follower.py")
    replica = RestStandIn(served, 1)
    try:
        def feed():
            return subprocess.run([PYTHON, "follower.py", "--serving", str(served), "--rest", replica.base, "--once"],
                                  cwd=alone, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                                  env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})

        refused = feed()
        assert refused.returncode == 1 and refused.stderr.strip().splitlines()[-1] == (
            "[follower] --rest needs replica.py beside this file: copy online/publish/replica.py too"), refused.stderr
        assert int(replica.model.signatures["applied_through"]()["sequence"]) == 0
        shutil.copy(ROOT / "online" / "publish" / "replica.py", alone / "replica.py")
        fed = feed()
        assert fed.returncode == 0, fed.stderr
        assert int(replica.model.signatures["applied_through"]()["sequence"]) == 3, fed.stdout
    finally:
        replica.close()


def test_apply_delta_requests_read_back_every_value_exactly():
    """Floats are written with fewer digits than json.dumps writes, yet read back bit for bit, in any shape."""
    from online.publish.replica import JSON_BLOCK_ROWS, apply_request

    random = np.random.default_rng(0)
    inputs = {"v32": (random.standard_normal((JSON_BLOCK_ROWS + 3, 5)) * 10.0 ** random.integers(-9, 9, (1, 5)))
              .astype(np.float32), "v64": random.standard_normal(7), "rows": random.integers(0, 1 << 40, 9),
              "none": np.zeros((0, 4), np.float32), "scalar": np.array(7, np.int64),
              "cube": np.ones((2, 2, 2), np.float32), "edges": np.array([0.0, -0.0, 1e-45, 3.4028235e38], np.float32)}
    request = apply_request(inputs)
    parsed = json.loads(request)
    assert parsed["signature_name"] == "apply_delta"
    for name, values in inputs.items():
        got = np.array(parsed["inputs"][name], values.dtype)
        assert got.tobytes() == values.tobytes() and got.size == values.size, name
    assert len(request) < 0.7 * len(json.dumps({k: v.tolist() for k, v in inputs.items()}))


def test_a_version_written_without_deltas_is_served_as_it_is(run, tmp_path):
    serving = tmp_path / "serving"
    _version(run, run.base, serving, 1, None, run.base_predictions)  # as earlier code (or deltas off) wrote it
    follower = Follower(serving, log=LOG.info)
    assert follower.catch_up() and follower.version == 1 and follower.sequence == 0
    assert "apply_delta" not in follower.model.signatures


def _version_one(run):
    """Version 1 of the base checkpoint in `run.serving` (its deltas 1.1 to 1.3 are there), written once."""
    if not (run.serving / "1").exists():
        _version(run, run.base, run.serving, 1, run.from_step, run.base_predictions)
    return run.serving / "1"


def _laid_out(run, serving, *, deltas: int, **through):
    """A serving folder holding a copy of version 1 (its trained_through.json holding `through` too) and of its
    first `deltas` deltas."""
    shutil.copytree(_version_one(run), serving / "1")
    record = serving / "1" / "assets.extra" / "trained_through.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), **through}))
    for sequence in range(1, deltas + 1):
        shutil.copytree(run.serving / names.DIRECTORY / f"1.{sequence}", serving / names.DIRECTORY / f"1.{sequence}")
    return serving


def _relabeled(serving, like: int, version: int, sequence: int, from_step: int, read_step: int) -> None:
    """Delta `version`.`sequence` of `serving`: the rows of its delta 1.`like`, its manifest saying `from_step` and
    `read_step` (a delta of another chain, or one written after a restart)."""
    target = serving / names.DIRECTORY / f"{version}.{sequence}"
    shutil.copytree(serving / names.DIRECTORY / f"1.{like}", target)
    manifest = json.loads((target / names.MANIFEST).read_text())
    (target / names.MANIFEST).write_text(json.dumps({**manifest, "version": version, "sequence": sequence,
                                                     "from_step": from_step, "read_step": read_step}))


def _predicted(predict, run) -> np.ndarray:
    raw, _ = run.base_predictions
    inputs = {key.removeprefix("inputs_"): tf.constant(value) for key, value in export.saved_inputs(raw).items()}
    return next(iter(predict(**inputs).values())).numpy()


@pytest.mark.parametrize("run", ["hashed"], indirect=True)
def test_apply_delta_refuses_a_delta_of_another_version_a_gap_or_a_repeat_and_changes_nothing(run):
    from online.publish.follower import delta_inputs, refusal

    model = tf.saved_model.load(str(_version_one(run)))
    apply, through = model.signatures["apply_delta"], model.signatures["applied_through"]
    manifest = json.loads((run.serving / names.DIRECTORY / "1.1" / names.MANIFEST).read_text())
    inputs = delta_inputs(run.serving, manifest, dict(apply.structured_input_signature[1]))
    before, step = _predicted(model.signatures["serving_default"], run), run.from_step
    other = f"delta 1.1 starts at step {step + 1} but the model holds through step {step} (version 1, delta 0): a " \
        "delta is missing or of another chain"
    for changed, why in (({names.VERSION: np.int64(2)}, "delta 2.1 is of version 2, the model is version 1"),
                         ({names.FROM_STEP: np.int64(step + 1)}, other)):
        answer = apply(**{name: tf.constant(value) for name, value in {**inputs, **changed}.items()})
        assert answer["refused"].numpy().decode() == why and not answer["applied"]
        assert refusal({**manifest, "version": 2} if names.VERSION in changed else {**manifest, "from_step": step + 1},
                       1, 0, step) == why  # the follower says it in the same words
        np.testing.assert_array_equal(_predicted(model.signatures["serving_default"], run), before)
    assert int(through()["sequence"]) == 0
    answer = apply(**{name: tf.constant(value) for name, value in inputs.items()})
    assert answer["applied"] and answer["refused"].numpy() == b"" and int(answer["sequence"]) == 1
    after = _predicted(model.signatures["serving_default"], run)
    assert not np.array_equal(after, before)
    answer = apply(**{name: tf.constant(value) for name, value in inputs.items()})  # again: applied already
    assert answer["refused"].numpy().decode() == "delta 1.1 is applied already (the model holds through delta 1)"
    np.testing.assert_array_equal(_predicted(model.signatures["serving_default"], run), after)
    assert _refused_through_tensorflow_1(_version_one(run), {**inputs, names.VERSION: np.int64(2)}) == \
        "delta 2.1 is of version 2, the model is version 1"  # TensorFlow Serving's loader runs the same check


def _refused_through_tensorflow_1(path, inputs: dict) -> str:
    """apply_delta's `refused` for `inputs`, run as TensorFlow Serving runs it: TensorFlow 1's loader, a session."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        signature = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(path)).signature_def["apply_delta"]
        feed = {signature.inputs[name].name: value for name, value in inputs.items()}
        return session.run(signature.outputs["refused"].name, feed).decode()


@pytest.mark.parametrize("run", ["hashed"], indirect=True)
def test_a_follower_never_serves_a_lower_step_and_holds_a_newer_version_back_until_it_catches_up(run, tmp_path):
    said = []
    serving = _laid_out(run, tmp_path / "serving", deltas=3, optimizer_step=4, delta_from_step=run.from_step)
    follower = Follower(serving, log=said.append, events=tmp_path / "events.jsonl")

    def look(version: int, sequence: int) -> None:
        follower.catch_up()
        assert (follower.version, follower.sequence) == (version, sequence), said

    look(1, 3)
    read = [json.loads((serving / names.DIRECTORY / f"1.{n}" / names.MANIFEST).read_text())["read_step"]
            for n in (1, 2, 3)]
    before = _predicted(follower.predict, run)
    _version(run, run.base, serving, 2, run.from_step, run.base_predictions, optimizer_step=4,
             delta_from_step=run.from_step)  # a restarted chief's, from an older checkpoint than deltas 1.x reached
    look(1, 3)
    assert sum("version 2 held back" in line for line in said) == 1, said
    _relabeled(serving, 3, 1, 4, read[2], read[2] + 5)  # version 1 takes its deltas on meanwhile
    look(1, 4)
    for sequence, (start, end) in enumerate(zip([run.from_step, *read[:2]], read), 1):
        _relabeled(serving, sequence, 2, sequence, start, end)
        look(1, 4)  # version 2 with its deltas: still below step read[2] + 5
    _relabeled(serving, 3, 2, 4, read[2], read[2] + 5)
    look(2, 4)
    assert said[-1] == f"[follower] serving version 2 through delta 4 (step {read[2] + 5}) (held back until then)"
    assert sum("held back:" in line for line in said) == 1, said
    served = [json.loads(line)["step"] for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert served == [read[2], read[2] + 5, read[2] + 5] and follower.step == read[2] + 5 > 4  # never lower
    np.testing.assert_allclose(_predicted(follower.predict, run), before, atol=1e-6)  # the same rows, by version 2


@pytest.mark.parametrize("run", ["hashed"], indirect=True)
def test_a_newer_version_that_does_not_load_is_said_once_and_the_current_one_takes_its_deltas_on(run, tmp_path):
    said = []
    serving = _laid_out(run, tmp_path / "serving", deltas=2)
    follower = Follower(serving, log=said.append)
    assert follower.catch_up() and (follower.version, follower.sequence) == (1, 2)
    for version, broken in ((2, "variables/variables.data-*"), (3, "saved_model.pb")):
        shutil.copytree(serving / "1", serving / str(version))
        for path in (serving / str(version)).glob(broken):
            path.write_bytes(path.read_bytes()[:100])  # cut short, as a disk that filled up leaves it
    assert not follower.catch_up()
    shutil.copytree(run.serving / names.DIRECTORY / "1.3", serving / names.DIRECTORY / "1.3")
    assert follower.catch_up() and not follower.catch_up()
    assert (follower.version, follower.sequence) == (1, 3)
    for version in (2, 3):
        assert sum(f"version {version} does not load" in line for line in said) == 1, said


@pytest.mark.parametrize("run", ["hashed"], indirect=True)
def test_a_followers_05_reading_of_a_delta_finds_every_input_and_applies_it(run):
    """0.5's follower took sequence and steps from the manifest and every other input from the bundle by name: the
    bundle carries `delta_version`, so a 0.5 follower keeps applying 0.6 deltas (docs/upgrading.md)."""
    old_scalars = {names.SEQUENCE: "sequence", names.FROM_STEP: "from_step", names.READ_STEP: "read_step"}
    model = tf.saved_model.load(str(_version_one(run)))
    apply = model.signatures["apply_delta"]
    folder = run.serving / names.DIRECTORY / "1.1"
    manifest = json.loads((folder / names.MANIFEST).read_text())
    reader = tf.train.load_checkpoint(str(folder / names.BUNDLE))
    inputs = {name: tf.constant(manifest[old_scalars[name]], tf.int64) if name in old_scalars else
              tf.constant(reader.get_tensor(name)) for name in apply.structured_input_signature[1]}
    answer = apply(**inputs)
    assert answer["applied"] and int(answer["sequence"]) == 1 and int(inputs[names.VERSION]) == 1


def test_a_delta_written_on_the_ps_holds_what_one_written_here_does(run, tmp_path):
    """The way training.output_dir_shared writes a delta (each part counted, then saved as slices in place: in one
    process every part is here) gives the same bundle, key by key, across chunks of every kind's tables."""
    written = {}
    for name, on_ps in (("here", False), ("on_ps", True)):
        source = DeltaSource(run.model, run.tracked, rows_on_ps=on_ps)
        delta = write_delta(source, DeltaFiles(tmp_path / name), version=1, sequence=1, from_step=run.from_step,
                            chunk_bytes=CHUNK, settle_s=0)
        written[name] = (delta.rows, tf.train.load_checkpoint(str(delta.path / names.BUNDLE)))
    (rows, here), (rows_on_ps, on_ps) = written["here"], written["on_ps"]
    assert rows == rows_on_ps and all(rows.values()), rows
    keys = here.get_variable_to_shape_map()
    assert keys == on_ps.get_variable_to_shape_map()
    for key in keys:
        np.testing.assert_array_equal(here.get_tensor(key), on_ps.get_tensor(key), err_msg=key)


@pytest.mark.parametrize("where", ["on the ps", "here"])
def test_rows_that_changed_after_their_count_are_cut_newest_first_and_never_below_the_next_deltas_start(where):
    from online.publish.delta_ranges import DeltaRace, _exactly, _exactly_here, _Range

    table = dataclasses.make_dataclass("Table", ["name", "devices"])("t", ["/device:CPU:0"])
    cut, values = (_exactly, [tf.constant([10, 11, 12, 13], tf.int64), tf.constant([[1.0], [2.0], [3.0], [4.0]]),
                              tf.constant([5, 3, 9, 3], tf.int64)])
    if where == "here":
        cut, values = _exactly_here, [value.numpy() for value in values]
    kept = cut(_Range(table, 0, 0, 4, 3, 0, 3), values, keep_from=4)
    assert [np.asarray(value).tolist() for value in kept] == [[11, 13, 10], [[2.0], [4.0], [1.0]], [3, 3, 5]]
    assert cut(_Range(table, 0, 0, 4, 4, 0, 4), values, keep_from=100) is values
    with pytest.raises(DeltaRace, match="stamped 5 changed again"):
        cut(_Range(table, 0, 0, 4, 2, 0, 2), values, keep_from=6)
    with pytest.raises(DeltaRace, match="held 4 changed rows after 5 were counted"):
        cut(_Range(table, 0, 0, 4, 5, 0, 5), values, keep_from=0)


def test_a_checkpoint_written_on_the_ps_holds_what_one_written_here_does(run, tmp_path):
    """training.output_dir_shared's way (each table shard's rows saved where they live, every ps at once: in one
    process every shard is here) gives the same checkpoint, key by key, for every kind's tables."""
    root = tf.train.Checkpoint(model=run.model, optimizer=run.model.optimizer)
    written = [checkpoint_io.save(root, str(tmp_path / name), chunk_bytes=CHUNK, rows_on_ps=on_ps)
               for name, on_ps in (("here", False), ("on_ps", True))]
    here, on_ps = (tf.train.load_checkpoint(prefix) for prefix in written)
    keys = here.get_variable_to_shape_map()
    assert keys == on_ps.get_variable_to_shape_map()
    for key in keys:
        np.testing.assert_array_equal(here.get_tensor(key), on_ps.get_tensor(key), err_msg=key)
