"""Dynamic tables on real servers (2 ps, 2 workers): racing workers, admission, expiry, a full table, a flood of
ids seen once, and a checkpoint that a new chief (over the cluster) and a single process both read back."""

from __future__ import annotations

import json

import numpy as np
import pytest

from clusterkit import ROOT, last_line_starting, run_python

pytestmark = pytest.mark.cluster


def chief(cluster, *args: str) -> dict:
    """Runs tests/dynamic_chief.py as the cluster's chief; its RESULT line."""
    spec = json.loads(cluster.read_text())["cluster"]
    tf_config = {"cluster": {job: spec[job] for job in ("chief", "worker", "ps")},
                 "task": {"type": "chief", "index": 0}}
    env = {"TF_CONFIG": json.dumps(tf_config), "TF_USE_LEGACY_KERAS": "1", "PYTHONPATH": str(ROOT),
           "GRPC_FAIL_FAST": "use_caller", "TF_CPP_MIN_LOG_LEVEL": "2"}
    run = run_python(str(ROOT / "tests" / "dynamic_chief.py"), *args, env_changes=env, timeout_s=600)
    line = last_line_starting(run.stdout, "RESULT ")
    assert line, run.stderr[-4000:]
    return json.loads(line.removeprefix("RESULT "))


@pytest.fixture(scope="module")
def found(shared_servers, tmp_path_factory):
    """One chief runs every scenario (tables/dynamic/ on 2 ps) and writes a checkpoint."""
    checkpoint = tmp_path_factory.mktemp("dynamic") / "tables"
    return {**chief(shared_servers, "scenarios", str(checkpoint)), "path": str(checkpoint)}


def test_two_workers_meeting_the_same_new_ids_at_once_give_each_one_row(found):
    facts = found["concurrency"]  # 15 rounds of two steps at once, each with the same 4000 new ids
    assert facts["admitted"] == facts["ids_held"] == facts["rows_in_use"] == facts["distinct_ids"]
    assert facts["rows_distinct"] and facts["owners_agree"]  # no row given twice, every row's owner indexed


def test_an_id_gets_its_row_at_the_admit_after_th_sighting(found):
    facts = found["admission"]  # admit_after 3: two ids seen together in three steps
    assert facts["held"] == [0, 0, 2]
    assert facts["reads_shared"] == [True, True, False]  # until admitted they read their features' shared rows


def test_expiry_frees_idle_rows_and_new_ids_reuse_them_reset(found):
    facts = found["expiry"]  # expire_after_steps 3: A idle from step 2, B trained at steps 3 to 7, 16 rows
    assert facts["in_use_after_each_b"] == [16, 16, 16, 8, 8]  # A's 8 rows expire at step 6 and are free at once
    assert facts["a_held_after"] == 0 and facts["expired"] == 8
    assert facts["c_took_a_rows"]  # the table full, C's ids take A's rows (out of the queue of free rows)
    assert facts["c_accumulators"] == [pytest.approx(1.1)]  # 0.1 + one gradient of 1: reset, not A's 3.1
    low, high = facts["c_vector_range"]  # a fresh random start in [-0.05, 0.05], one Adagrad step of -0.0953
    assert -0.1454 <= low and high <= -0.0452


def test_a_slowed_workers_update_for_a_row_given_to_another_id_meanwhile_lands_nowhere(found):
    facts = found["race"]  # one worker's step looks A up and waits; the other's steps expire A and give B its rows
    assert facts["looked_up_then_waited"] and facts["b_took_a_rows"]
    assert facts["b_rows_untouched"]  # B's rows, slots and last steps as they were before A's update arrived
    assert facts["misdirected"] == 8 and facts["expired"] == 8  # A's 8 row updates dropped, counted


def test_a_full_table_turns_new_ids_away_to_the_shared_rows(found):
    facts = found["capacity"]  # 16 rows over 2 partitions, 80 new ids
    assert facts["partitions"] == 2
    assert facts["ids_held"] == facts["rows_in_use"] == 16 and facts["turned_away"] == 80 - 16
    assert facts["turned_away_read_shared"]


def test_pooled_ids_from_a_per_worker_dataset_take_rows_and_their_padding_takes_none(found):
    facts = found["pooled"]  # 2 features of 0 to 3 ids per example, the feature axis of unknown size
    assert facts["held"] == [-2, -1, 5, 7, 8, 9]  # negative ids too; the padding (0) is no id
    assert facts["rows_in_use"] == 6 and facts["admitted"] == 6


def test_a_flood_of_ids_seen_once_does_not_take_the_rows(found):
    facts = found["flood"]  # admit_after 2: 100 frequent ids, and 20,000 ids seen once
    assert facts["frequent_kept_rows"] and facts["frequent_slots_grew"]  # same rows, never reset
    assert facts["ids_held"] - 100 <= 0.01 * facts["junk"]  # the sketch let at most 1 % of the junk in


def test_a_checkpoint_is_resumed_by_a_new_chief_and_read_by_one_process(shared_servers, found):
    resumed = chief(shared_servers, "resume", found["path"])
    assert resumed["outputs_differ"] == 0.0 and all(resumed["same"].values()), resumed
    assert resumed["restored"] == found["saved"]["stats"]  # counters too
    assert resumed["after_training"]["admitted"] == resumed["restored"]["admitted"] + 50  # it trains on
    _read_by_one_process(found["path"])


def _read_by_one_process(path: str) -> None:
    """As the sidecar evaluator does: no cluster, one partition holding every id."""
    import tensorflow as tf

    from tables.dynamic.layer import DynamicTables
    from tables.sparse import LeanAdagrad
    from tables.streaming import checkpoint_io

    layer = DynamicTables(4000, 16, admit_after=2)
    layer.build(tf.TensorShape([None, 2]))
    optimizer = LeanAdagrad(learning_rate=0.1)
    optimizer._create_all_weights(layer.trainable_weights)
    layer.bind_optimizer(optimizer)
    checkpoint_io.restore(tf.train.Checkpoint(layer=layer, optimizer=optimizer), path, chunk_bytes=64 << 10)
    expected = np.load(path + "-expected.npz")
    assert len(layer.partitions) == 1
    np.testing.assert_array_equal(layer(tf.constant(expected["probe"]), training=False).numpy(), expected["outputs"])
    np.testing.assert_array_equal(layer.snapshot()["slot-accumulator"], expected["slot-accumulator"])
