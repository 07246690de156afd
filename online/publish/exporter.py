"""`python -m online.publish.exporter REQUEST.json`: writes a checkpoint as a serving version, output/model or
output/best_model, holding no more of a table than three chunks, and checks what it wrote against the trained model.

The model is built once as a template (tables as one-row placeholders, template.py), takes the checkpoint's small
weights, and is written in each format with its tables streamed from the checkpoint (saved_model.py,
keras_files.py), under a hidden name renamed into place at the end: a reader never sees half of one. The check
runs the written SavedModel's weights on the reference inputs, reading only the rows they look up (partial.py),
and compares with the trained model's predictions the caller saved. The follow loop runs it as a process of its
own for each serving version (so hand-out never waits and the chief's memory stays flat); the chief's export of
output/model at the end of a fixed-data run and the evaluator's best_model call `answer` in-process.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import shutil
import sys
import time
from pathlib import Path

from common import durable, stack_dump
from common.errors import UserError
from online.publish.request import MODEL, VERSION, ExportRequest, ExportResult

SAVED_MODEL_NAME, H5_NAME, KERAS_NAME = "saved_model", "model.h5", "model.keras"


def export_checkpoint(request: ExportRequest, log) -> ExportResult:
    """Writes what `request` asks and returns where, with the export check's largest difference."""
    import numpy as np

    from online.publish.saved_model import load_weights
    from online.publish.template import build_serving
    from tables.streaming.bundle import BundleReader

    started = time.monotonic()
    options, source = _options_and_source(request)
    serve, inner, placed = build_serving(options, source, chunk_bytes=_chunk(options))
    fillings = load_weights(inner, placed, BundleReader(request.checkpoint))
    if request.kind != VERSION:  # a version is saved without loss and metrics (for serving alone): no names to pick
        _resolve_metrics(inner, source)
    with np.load(request.reference) as reference:
        inputs, trained = _reference(reference)
    if request.against_checkpoint:  # the trained model moved on while the checkpoint was written: its own
        trained = _checkpoint_predictions(serve, inner, placed, request.checkpoint, inputs, _chunk(options), log)
    writer = _write_version if request.kind == VERSION else _write_model
    result = writer(request, options, source, serve, inner, placed, fillings, (inputs, trained), log)
    return ExportResult(**{**result, "seconds": round(time.monotonic() - started, 2)})


def _options_and_source(request: ExportRequest):
    from cluster.config import PROJECT_ROOT
    from cluster.training_parse import parse_training_options
    from models.sources import data_for_model

    options = parse_training_options(request.options)
    return options, data_for_model(options, PROJECT_ROOT)


def _chunk(options) -> int:
    from tables.streaming.rows import chunk_bytes_of
    return chunk_bytes_of(options)


def _checkpoint_predictions(serve, inner, placed, checkpoint: str, inputs, chunk_bytes: int, log):
    """The checkpoint's predictions on raw `inputs`, its tables read where they look."""
    from online.publish.partial import PartialModel
    from online.publish.saved_model import training_keys
    from tables.streaming.bundle import BundleReader

    return PartialModel(serve, inner, BundleReader(checkpoint), training_keys(inner), placed, log=log,
                        chunk_bytes=chunk_bytes)(inputs, raw=True)


def _resolve_metrics(model, source) -> None:
    """Lets Keras pick what each metric name means for this data (`accuracy` on class indices is
    sparse_categorical_accuracy), as it does at the first evaluation, so that the saved model names the right
    one; skipped when there is no data to show it. The model does not run (its tables may be placeholders):
    the metrics see the data's labels beside zeros of the model's output shape."""
    import tensorflow as tf

    from data import contract

    try:
        batch = next(iter(contract.batch(source.split("train"), 2).take(1)), None)
    except tf.errors.OpError:  # a data file that cannot be read (quarantined, gone): the names stay as they are
        batch = None
    if batch is not None and model.compiled_metrics is not None:
        labels = batch[1]
        zeros = tf.zeros([tf.shape(labels)[0], *(d or 1 for d in model.output.shape[1:])], model.output.dtype)
        model.compiled_metrics.update_state(labels, zeros)
        for metric in model.metrics:
            metric.reset_state()


def _reference(reference) -> tuple:
    """The raw inputs and trained predictions of a reference .npz (export.saved_inputs' layout)."""
    from models.export import loaded_inputs
    return loaded_inputs(reference), reference["predictions"]


def _write_saved_model(directory: Path, request, options, source, serve, inner, placed, fillings, reference,
                       log) -> tuple[float, int]:
    """The SavedModel at `directory`, then its check: the largest difference from the trained predictions, and the
    bytes of rows linked from the checkpoint rather than copied."""
    from models.export import check_export
    from online.publish import saved_model
    from online.publish.partial import PartialModel
    from models.raw_export import signatures
    from tables.streaming.bundle import BundleReader

    chunk = _chunk(options)
    served = signatures(serve, source)
    if request.kind == VERSION and request.delta_from_step is not None:  # a version that takes deltas in place
        from online.publish.delta_signatures import version_signatures
        served = version_signatures(serve, inner, served, version=request.version, from_step=request.delta_from_step)
    linked = saved_model.write(directory, serve, fillings, signatures=served, chunk_bytes=chunk, log=log,
                               compiled=request.kind != VERSION)  # a version is for serving; model/ evaluates
    written = BundleReader(str(directory / saved_model.VARIABLES / saved_model.VARIABLES))
    inputs, trained = reference
    check = PartialModel(serve, inner, written, saved_model.bundle_keys(inner, written), placed, log=log,
                         chunk_bytes=chunk)
    return check_export(trained, check(inputs, raw=True)), linked


def _write_version(request, options, source, serve, inner, placed, fillings, reference, log) -> dict:
    import json

    from online.publish.versions import EXTRA, REFERENCE, TRAINED_THROUGH, ServingVersions

    versions = ServingVersions(Path(request.destination), request.keep)
    writing = versions.writing(request.version)
    shutil.rmtree(writing, ignore_errors=True)
    try:
        largest, linked = _write_saved_model(writing, request, options, source, serve, inner, placed, fillings,
                                             reference, log)
        extra = writing / EXTRA
        extra.mkdir(exist_ok=True)
        written = time.time()
        (extra / TRAINED_THROUGH).write_text(json.dumps({**(request.trained_through or {}),
                                                         "version": request.version, "written": written}, indent=1))
        shutil.copyfile(request.reference, extra / REFERENCE)
        size = _bytes(writing)
        final = versions.publish(request.version)
    except BaseException:
        shutil.rmtree(writing, ignore_errors=True)
        raise
    return {"path": str(final), "largest": largest, "bytes": size, "linked_bytes": linked, "version": request.version,
            "written": written}


def _write_model(request, options, source, serve, inner, placed, fillings, reference, log) -> dict:
    from online.publish import keras_files
    from online.publish.versions import REFERENCE

    destination = Path(request.destination)
    writing, _ = _side_paths(destination)
    shutil.rmtree(writing, ignore_errors=True)
    writing.mkdir(parents=True)
    try:  # the Keras files first: the check may build a dynamic table's index in the template, which they would save
        keras_files.write_h5(writing / H5_NAME, serve, fillings, chunk_bytes=_chunk(options))
        keras_files.write_keras(writing / KERAS_NAME, serve, fillings, chunk_bytes=_chunk(options))
        largest, linked = _write_saved_model(writing / SAVED_MODEL_NAME, request, options, source, serve, inner,
                                             placed, fillings, reference, log)
        if request.kind == MODEL:
            shutil.copyfile(request.reference, writing / REFERENCE)
        size = _bytes(writing)
        _swap_in(writing, destination)
    except BaseException:
        shutil.rmtree(writing, ignore_errors=True)
        raise
    paths = {name: str(destination / file) for name, file in
             (("h5", H5_NAME), ("saved_model", SAVED_MODEL_NAME), ("keras", KERAS_NAME))}
    return {"path": str(destination), "paths": paths, "largest": largest, "bytes": size, "linked_bytes": linked}


def _side_paths(destination: Path) -> tuple[Path, Path]:
    """Where a model folder is written before it takes `destination`'s place, and where the old one waits."""
    return destination.with_name(f".{destination.name}.writing"), destination.with_name(f".{destination.name}.old")


def remove_leftovers(destination: Path) -> None:
    """What a writer of model folder `destination` that died midway left (called when its writer starts). A swap
    that died between its two renames left the old folder aside and none in place: the old one goes back, never
    the new one, since what describes the folder (best.json inside it, the evaluator's recorded best, the run
    summary) is written after the swap and still describes the old; the writer then writes the new one again."""
    _put_back(destination)
    for leftover in _side_paths(destination):
        shutil.rmtree(leftover, ignore_errors=True)


def _swap_in(writing: Path, destination: Path) -> None:
    """`writing` takes `destination`'s place (the old one, if any, goes): a reader sees the old whole, the new
    whole or, between the two renames, none. A crash at any point, of the process or the host, leaves one whole:
    the new one is flushed to disk before the first rename, each rename before the next step, and
    remove_leftovers puts the old one back."""
    _, old = _side_paths(destination)
    _put_back(destination)  # of an earlier swap that died between its renames
    shutil.rmtree(old, ignore_errors=True)
    durable.sync_tree(writing)
    if destination.exists():
        durable.rename(destination, old)
    durable.rename(writing, destination)
    shutil.rmtree(old, ignore_errors=True)


def _put_back(destination: Path) -> None:
    """The old folder back in `destination`'s place when a swap died after moving it aside."""
    _, old = _side_paths(destination)
    if old.is_dir() and not destination.exists():
        durable.rename(old, destination)


def _bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def answer(request: ExportRequest, log) -> ExportResult:
    """What `request` asks, written; or its error, logged (`fatal` when trying again cannot help)."""
    try:
        return export_checkpoint(request, log)
    except UserError as error:
        log.error("%s", error.problems[0].text())
        return ExportResult(error=error.problems[0].text(), fatal=True)
    except (KeyError, ValueError) as error:  # the checkpoint does not hold this model
        log.error("writing %s from %s failed: %s", request.kind, Path(request.checkpoint).name, error)
        return ExportResult(error=f"{type(error).__name__}: {error}", fatal=True)
    except Exception as error:  # noqa: BLE001 - a full disk, a file gone, a TensorFlow error: the next try may succeed
        log.error("writing %s from %s failed: %s", request.kind, Path(request.checkpoint).name, error)
        return ExportResult(error=f"{type(error).__name__}: {error}")


def prepare_process() -> None:
    """An exporter process's TensorFlow: on the CPU, in no cluster, imported without its start-up lines."""
    from common.graph_style import trace_toolkit_code_as_written
    from common.logs import import_tensorflow_quietly, quiet_tensorflow

    os.environ["CUDA_VISIBLE_DEVICES"] = "-1"
    os.environ.pop("TF_CONFIG", None)
    import_tensorflow_quietly()
    quiet_tensorflow()
    trace_toolkit_code_as_written()
    stack_dump.on_sigusr1()


def main(request_path: str) -> int:
    """The exporter process: writes what the request asks, its result beside the request; 2 when it cannot."""
    from common.logs import task_logger

    request = ExportRequest.load(Path(request_path))
    result_path = Path(request_path).with_suffix(".result.json")
    log = task_logger(request.task)
    prepare_process()
    result = answer(request, log)
    if result.error:
        result.save(result_path)
        return 2
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    dataclasses.replace(result, peak_rss_mb=round(peak_mb, 1)).save(result_path)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m online.publish.exporter REQUEST.json")
    sys.exit(main(sys.argv[1]))
