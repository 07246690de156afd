"""One training run on the chief: strategy, model, resume, fit with callbacks, export and summary."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import tf_keras

from coordinator import export, models, strategy
from coordinator.callbacks import EpochReport, FirstStepReport, SaveEachEpoch, StepDecay
from coordinator.checkpoints import EpochCheckpoints
from coordinator.options import TrainingOptions
from coordinator.summary import COMPLETE, RUNNING, SUMMARY_NAME, read_summary, write_summary
from data import source_for
from roles.config import PROJECT_ROOT, ClusterConfig

def variable_placement(model) -> dict[str, list[str]]:
    """Each trainable variable's devices: several for a variable the partitioner split over ps."""
    placement: dict[str, list[str]] = {}
    for variable in model.trainable_variables:  # a split variable is listed as its parts, `<name>/part_<k>`
        placement.setdefault(variable.name.split("/part_")[0].removesuffix(":0"), []).append(variable.device)
    return placement


def _build_model(config: ClusterConfig, options: TrainingOptions, source, log):
    pss = strategy.build(config, options)
    tf_keras.utils.set_random_seed(options.seed)
    with pss.scope():
        model = models.build(options.model, source.input_shape, source.num_classes)
        models.compile_model(model, options, steps_per_execution=options.steps_per_execution)
        model.optimizer.build(model.trainable_variables)  # slots exist before restore, so it is not deferred
    for name, devices in variable_placement(model).items():
        if len(devices) > 1:
            log.info("%s split into %d shards on %s", name, len(devices),
                     ", ".join(d.split("/device")[0].removeprefix("/job:") for d in devices))
    return model


def epoch_checkpoints(config: ClusterConfig, options: TrainingOptions, model, *, io_device: str | None,
                      scratch: Path | None = None) -> EpochCheckpoints:
    """The per-epoch checkpoint series in OUTPUT/checkpoints that resuming, the evaluator and export share."""
    return EpochCheckpoints(config.path(options.output_dir) / "checkpoints", model=model, optimizer=model.optimizer,
                            keep=options.keep_checkpoints, has_evaluator=bool(config.jobs.get("evaluator")),
                            io_device=io_device, scratch=scratch)


def resume(checkpoints: EpochCheckpoints, options: TrainingOptions, output: Path, model, log, *,
           lead: bool = True) -> int | None:
    """Restores the newest checkpoint and returns the epochs it completed, or None when the plan is already
    complete; the lead marks the run as running (the evaluator waits while it is)."""
    done = checkpoints.restore_latest()
    if done >= options.epochs and read_summary(output).get("status") == COMPLETE:
        log.info("already complete: %d of %d epochs are in %s; nothing to train", done, options.epochs, output)
        return None
    if done:
        log.info("resuming after epoch %d (optimizer step %d)", done, int(model.optimizer.iterations.numpy()))
    if lead:
        write_summary(output, {"status": RUNNING, "epochs": options.epochs})
    return done


def last_epoch(history) -> dict[str, float]:
    """The final epoch's metrics from a Keras History."""
    return {k: float(v[-1]) for k, v in history.history.items()} if history.history else {}


def run_training(config: ClusterConfig, options: TrainingOptions, log) -> dict:
    """Trains (or resumes) to `options.epochs`, exports the model and returns the run summary it wrote."""
    output = config.path(options.output_dir)
    source = source_for(options, PROJECT_ROOT)  # data mistakes stop here, before the cluster is probed
    workers = len(config.jobs["worker"])
    global_batch = options.per_worker_batch * workers
    steps_per_epoch = options.steps_per_epoch or source.steps_per_epoch(global_batch)
    log.info("%s: %d training examples, global batch %d (%d per worker), %d steps per epoch",
             source.name, source.sizes["train"], global_batch, options.per_worker_batch, steps_per_epoch)
    log.info("%s: %s", source.name, source.sharding(workers))

    strategy.wait_for_cluster(config, options.probe_timeout_s, log)
    model = _build_model(config, options, source, log)
    checkpoints = epoch_checkpoints(config, options, model, io_device=strategy.CHIEF_CPU)
    done = resume(checkpoints, options, output, model, log)
    if done is None:
        return read_summary(output)

    started = time.monotonic()
    history = model.fit(
        tf_keras.utils.experimental.DatasetCreator(source.train_dataset_fn(global_batch, options.seed,
                                                                           workers=workers)),
        epochs=options.epochs, initial_epoch=done, steps_per_epoch=steps_per_epoch, verbose=0,
        callbacks=[StepDecay(options), SaveEachEpoch(checkpoints), FirstStepReport(log),
                   EpochReport(log, output / "tensorboard" / "train", epochs=options.epochs,
                               steps_per_epoch=steps_per_epoch, global_batch=global_batch)])
    train_seconds = time.monotonic() - started
    return export_and_summarise(config, options, model, source, output, log, final_metrics=last_epoch(history),
                                 train_seconds=train_seconds, steps_per_epoch=steps_per_epoch,
                                 global_batch=global_batch, checkpoint=checkpoints.latest_path())


def export_and_summarise(config, options, model, source, output: Path, log, *, device: str | None = strategy.CHIEF_CPU,
                         **facts) -> dict:
    """Exports the last checkpoint's whole weights, checks them against `model`, and writes the run summary."""
    whole = export.restore_whole(options, source.input_shape, source.num_classes, facts["checkpoint"],
                                 device=device, io_device=device)
    inputs = export.reference_inputs(source.split("test"))
    trained = model(inputs, training=False).numpy()
    exported = whole(inputs, training=False).numpy()
    log.info("export check: largest difference between trained and exported predictions %.2e",
             float(np.abs(trained - exported).max()))
    paths = export.export(whole, output / "model")
    np.savez(output / "model" / "reference_predictions.npz", inputs=inputs, predictions=trained)
    summary = {
        "status": COMPLETE, "options": json.loads(json.dumps(options.__dict__)),
        "epochs": options.epochs, "optimizer_steps": int(model.optimizer.iterations.numpy()),
        "steps_per_epoch": facts["steps_per_epoch"], "global_batch": facts["global_batch"],
        "strategy": options.strategy, "workers": facts.get("workers", len(config.jobs["worker"])),
        "ps": len(config.jobs.get("ps", ())) if options.strategy == "parameter_server" else 0,
        "train_seconds": round(facts["train_seconds"], 2), "final_metrics": facts["final_metrics"],
        "checkpoint": facts["checkpoint"], "model": paths, "tensorboard": str(output / "tensorboard"),
        "variable_placement": variable_placement(model),
    }
    write_summary(output, summary)
    log.info("model exported to %s (.h5, SavedModel, .keras); summary %s", output / "model", output / SUMMARY_NAME)
    return summary
