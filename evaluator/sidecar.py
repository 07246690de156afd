"""`python -m evaluator.sidecar [--cluster cluster.json]`: evaluate each checkpoint as training writes it.

With `--checkpoint PATH` or `--model PATH` it evaluates once instead (e.g. `--split test` for the final report).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import fire

from cluster import config as cluster_config
from cluster import taskspec
from cluster.config import PROJECT_ROOT, ClusterConfig, Task
from cluster.evaluation_options import EvaluationOptions
from cluster.run_files import RunFiles
from common import stack_dump
from common.errors import Problem, UserError, exit_on_user_error
from common.disk_full import exit_on_full_disk
from common.exit_file import run_recording_exit
from common.graph_style import trace_toolkit_code_as_written
from common.logs import quiet_tensorflow, task_logger
from common.version import titled

SPLITS = ("train", "validation", "test")


def _prepare_process(config: ClusterConfig):
    """The evaluator's environment: a TF_CONFIG holding only itself, so it never joins the training cluster."""
    evaluators = config.tasks(("evaluator",))
    task = evaluators[0] if evaluators else Task("evaluator", 0, config.lead.address)
    taskspec.apply_to_this_process(config, task)
    if not evaluators:
        os.environ.pop("TF_CONFIG", None)
    log = task_logger(task.name)
    quiet_tensorflow()
    trace_toolkit_code_as_written()
    stack_dump.on_sigusr1()
    return log


def _evaluate_once(config: ClusterConfig, log, *, checkpoint: str | None, model: str | None, split: str,
                   output_json: str | None) -> None:
    import tf_keras

    from models.compiled import CUSTOM_OBJECTS
    from online.publish.template import Template
    from tables.streaming.rows import chunk_bytes_of
    from models.sources import source_for_model
    from evaluator.loop import metrics_line
    from evaluator.scoring import scores

    options = config.training
    source = source_for_model(options, PROJECT_ROOT)
    inputs = source.eval_dataset(split, config.evaluation.batch, raw=bool(model))  # an export takes raw features
    if model:
        if not Path(model).exists():
            raise UserError(Problem("--model", model, "does not exist", "give a .h5, .keras or SavedModel path"))
        loaded = tf_keras.models.load_model(model, custom_objects=CUSTOM_OBJECTS)
        results = {name: float(value) for name, value in loaded.evaluate(inputs, verbose=0, return_dict=True).items()}
    else:
        if not Path(checkpoint + ".index").exists():
            raise UserError(Problem("--checkpoint", checkpoint, "is not a checkpoint prefix",
                                    "give e.g. output/checkpoints/ckpt-6 (the part before .index)"))
        template = Template(options, source, chunk_bytes=chunk_bytes_of(options), log=log)
        results = scores(template.at(checkpoint), template.inner, inputs)  # its tables read where the data looks
    metrics = {f"{split}_{name}": value for name, value in results.items()}
    log.info(metrics_line(f"{split} | {Path(model or checkpoint).name}", metrics))
    if output_json:
        Path(output_json).write_text(json.dumps({"split": split, "source": model or checkpoint,
                                                 "examples": source.sizes.get(split), "metrics": metrics}, indent=2))


@exit_on_user_error()
def evaluate(cluster: str = "cluster.json", checkpoint: str | None = None, model: str | None = None,
             split: str = "validation", output_json: str | None = None) -> None:
    if split not in SPLITS:
        raise UserError(Problem("--split", split, "unknown split", f"use one of {', '.join(SPLITS)}"))
    if checkpoint and model:
        raise UserError(Problem("--model", model, "cannot be combined with --checkpoint", "give one of them"))
    if split != "validation" and not (checkpoint or model):
        raise UserError(Problem("--split", split, "applies to a one-off evaluation only (following training "
                                "always reads the validation split)", "add --checkpoint PATH or --model PATH"))
    config = cluster_config.load(cluster)
    if config.training.follow_data and (checkpoint or model):
        raise UserError(Problem("--checkpoint" if checkpoint else "--model", checkpoint or model, "a followed run "
                                "(training.follow_data) has no fixed split to score it on",
                                "load a serving version (output/serving/<version>) with tf.saved_model.load and "
                                "score it on files of your choice"))
    log = _prepare_process(config)
    from models.sources import data_for_model
    from data import bad_records_named
    from evaluator.loop import SidecarEvaluator

    with bad_records_named(), exit_on_full_disk(log, config.path(config.training.output_dir)):
        if checkpoint or model:
            _evaluate_once(config, log, checkpoint=checkpoint, model=model, split=split, output_json=output_json)
            return
        options = config.training
        source = data_for_model(options, PROJECT_ROOT)
        evaluator = SidecarEvaluator(training=options, evaluation=config.evaluation, source=source,
                                     files=RunFiles(config.path(options.output_dir)), log=log)
        sys.exit(evaluator.run())


def _option_help(name: str) -> str:
    return next(field.metadata["help"] for field in dataclasses.fields(EvaluationOptions) if field.name == name)


evaluate.__doc__ = titled(f"""Evaluates each checkpoint as the chief writes it, keeps the best model; or one model once.

Follows OUTPUT_DIR/checkpoints of the training section until the run is complete and every checkpoint is
evaluated (exit 0). When it gives up is evaluation.idle_timeout_s: {_option_help("idle_timeout_s")} (the lead's
heartbeat: OUTPUT_DIR/progress.json). It must see the chief's output directory: run it on the chief's host.

Args:
  cluster: path of cluster.json.
  checkpoint: evaluate this checkpoint prefix once (e.g. output/checkpoints/ckpt-6) and exit.
  model: evaluate this exported model (.h5, .keras or SavedModel) once and exit.
  split: the split a one-off evaluation reads: train, validation or test.
  output_json: also write a one-off evaluation's metrics to this JSON file.
""")


if __name__ == "__main__":
    run_recording_exit(lambda: fire.Fire(evaluate, name="evaluator.sidecar"))
