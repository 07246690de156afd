"""A hashed table's stamp that lands late: its update's clock read, then a delta reads the rows, then the stamp is
written (a ps stalled between the two ops). The next delta, reading rows from the one before's `from_step`, still
carries the row, and base plus the deltas equals the live table bit for bit; read from its own `from_step` alone, as
before, the row stayed stale (one process, no cluster)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import deltakit
from cluster.config import PROJECT_ROOT
from cluster.training_parse import parse_training_options
from data import source_for
from models.compiled import build_compiled
from online.publish import delta_format as names
from online.publish.deltas import DeltaFiles, DeltaSource, write_delta
from tables.changed_rows import step_clock
from tables.kinds import track_changes
from tables.row_stamps import stamp_rows
from tables.streaming import checkpoint_io

TRAINING = {"model": "dlrm", "dataset": "synthetic_criteo", "table_rows": 300, "embedding_dim": 4, "top_mlp": [8],
            "bottom_mlp": [8], "embedding_kind": "hashed"}


@pytest.mark.parametrize("rows_from_the_delta_before, carried", [(True, True), (False, False)])
def test_a_stamp_landing_after_a_delta_read_its_row_is_carried_by_the_next(tmp_path, rows_from_the_delta_before,
                                                                           carried):
    options = parse_training_options(TRAINING)
    source = source_for(options, PROJECT_ROOT)
    tf.keras.utils.set_random_seed(0)
    model = build_compiled(options, source)
    tracked = track_changes(model)
    batches = source.train_dataset_fn(64, 0)(tf.distribute.InputContext())
    deltas, files = DeltaSource(model, tracked), DeltaFiles(tmp_path / "serving")
    model.fit(batches.take(2), epochs=1, verbose=0)
    deltas.advance()
    base = checkpoint_io.save(tf.train.Checkpoint(model=model, optimizer=model.optimizer), str(tmp_path / "base"))
    from_step = deltas.watermark_before(int(step_clock(model).numpy()))

    part = tracked[0].parts[0]
    stamps = model.embedding_optimizer.stamps_of(part.shard)
    row = int(np.argmin(stamps.numpy()))  # a row no delta would carry
    clock_read = int(part.clock.numpy()[0])  # the update reads the clock ...
    part.shard.scatter_update(tf.IndexedSlices(tf.fill([1, part.shard.shape[1]], 7.0), [row]))  # ... changes the row
    model.fit(batches.skip(2).take(1), epochs=1, verbose=0)
    first = write_delta(deltas, files, version=1, sequence=1, from_step=from_step, settle_s=0)  # reads before it
    stamp_rows(stamps, tf.constant([row]), tf.constant(clock_read, tf.int64))  # ... and its stamp lands late
    assert clock_read < first.read_step
    write_delta(deltas, files, version=1, sequence=2, from_step=first.read_step,
                rows_from=first.from_step if rows_from_the_delta_before else None, settle_s=0)

    live = deltakit.live_tables(model, tracked)
    replayed = deltakit.replayed(deltakit.base_tables(base, {t: list(f) for t, f in live.items()}),
                                 deltakit.deltas_on_disk(tmp_path / "serving", 1))
    first_table = next(iter(live))
    missed = live[first_table][names.VECTORS][row] != replayed[first_table][names.VECTORS][row]
    assert deltakit.differences(live, replayed) == ([] if carried else [f"{first_table}.{names.VECTORS}"])
    assert missed.any() != carried  # the late row, and only it
