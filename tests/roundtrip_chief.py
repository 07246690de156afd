"""A chief-like program for tests/test_recommender_restore.py: many tiny recommenders under ONE strategy.

`save CLUSTER DIR CASES`: builds each case's model (the chief's own set-up code), trains 4 steps, saves an epoch's
end through EpochCheckpoints, trains 2 steps more and saves a checkpoint within the next epoch (each in its own
directory, so each is the newest of its series); after each save, writes the model's predictions on 16 test inputs
and the value of every model and optimizer variable (slots included) to DIR/<case>/<when>.npz.
`restore CLUSTER DIR CASES`: builds each case's model afresh and restores each series through
EpochCheckpoints.restore_latest, then writes the same values to DIR/<case>/<when>-restored.npz.
CASES is a JSON list of {"name": ..., "fused_tables": ..., "training": {...}} (the table layout is not a training
option, so it is given beside them).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cluster import config as cluster_config  # noqa: E402
from cluster import taskspec  # noqa: E402
from cluster.training_parse import parse_training_options  # noqa: E402
from common.graph_style import trace_toolkit_code_as_written  # noqa: E402

STEPS_TO_EPOCH_END, STEPS_INTO_NEXT_EPOCH = 4, 2
STEPS = STEPS_TO_EPOCH_END + STEPS_INTO_NEXT_EPOCH
SERIES = {"epoch_end": "ckpt-1", "within_epoch": f"ckpt-1-{STEPS_INTO_NEXT_EPOCH}"}


def state(model, inputs) -> dict:
    """Predictions, then every variable of the model and of both optimizers in creation order (shards listed)."""
    variables = [*model.weights, *model.optimizer.variables, *model.embedding_optimizer.variables()]
    values = {f"v{k:03d} {v.name}": v.numpy() for k, v in enumerate(variables)}
    return {"predictions": model(inputs, training=False).numpy(), **values,
            "steps": int(model.optimizer.iterations.numpy()),
            "embedding_steps": int(model.embedding_optimizer.iterations.numpy())}


def build(run, distribution, fused_tables: bool):
    """The case's model as the chief builds it (build_compiled's recommender branch), with its table layout."""
    import tf_keras

    from models import recommenders, zoo

    options = run.options
    tf_keras.utils.set_random_seed(options.seed)
    with distribution.scope():
        return recommenders.build_and_compile(
            options.model, dataclasses.replace(recommenders.from_training(options), fused_tables=fused_tables),
            zoo.make_optimizer(options), features=run.source.feature_spec, metric_names=options.metrics,
            steps_per_execution=options.steps_per_execution)


def train_step(model, distribution):
    """The model's own train step (both optimizers), run by the chief on the variables the ps hold: the restore is
    under test here, not the workers, and scheduling a fresh model's steps on workers costs seconds per model."""
    import tensorflow as tf

    return tf.function(lambda batch: distribution.run(model.train_step, args=(batch,)))


def save(model, distribution, series: dict, batches: list, inputs, out: Path) -> None:
    import numpy as np

    from models.checkpoints import Position

    step, left = train_step(model, distribution), iter(batches)
    for _ in range(STEPS_TO_EPOCH_END):
        step(next(left))
    series["epoch_end"].save(Position(1))
    np.savez(out / "epoch_end.npz", **state(model, inputs))
    for _ in range(STEPS_INTO_NEXT_EPOCH):
        step(next(left))
    series["within_epoch"].save(Position(1, STEPS_INTO_NEXT_EPOCH))
    np.savez(out / "within_epoch.npz", **state(model, inputs))


def restore(model, series: dict, inputs, out: Path) -> None:
    import numpy as np

    for when, checkpoints in series.items():
        position = checkpoints.restore_latest()
        assert position.name == SERIES[when], (when, position)
        np.savez(out / f"{when}-restored.npz", **state(model, inputs))


def main(phase: str, cluster: str, directory: str, cases_json: str) -> None:
    config = cluster_config.load(cluster)
    taskspec.apply_to_this_process(config, config.task("chief", 0))
    trace_toolkit_code_as_written()  # as the chief does (common/graph_style.py)
    from models import export
    from coordinator import setup, strategy

    cases = json.loads(cases_json)
    options = [parse_training_options(case["training"]) for case in cases]
    runs = [setup.plan(dataclasses.replace(config, training=o), o, logging.getLogger("roundtrip"),
                       workers=len(config.jobs["worker"]), batch_note="") for o in options]
    distribution = strategy.build(config, runs[0].options)  # one strategy, every model (their partitioner is alike)
    source = runs[0].source  # the cases differ in model and optimizers, not in data
    inputs = export.reference_inputs(source.split("test"))
    batches = list(source.split("train").batch(runs[0].global_batch).take(STEPS))
    for case, run in zip(cases, runs, strict=True):
        out = Path(directory) / case["name"]
        out.mkdir(parents=True, exist_ok=True)
        model = build(run, distribution, case["fused_tables"])
        series = {when: setup.epoch_checkpoints(dataclasses.replace(run, files=dataclasses.replace(
            run.files, output=Path(run.files.output) / when)), model, io_device=strategy.CHIEF_CPU)
            for when in SERIES}
        if phase == "restore":
            restore(model, series, inputs, out)
        else:
            save(model, distribution, series, batches, inputs, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
