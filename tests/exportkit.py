"""Exports written the way the chief and the evaluator write them (online/publish/), from a checkpoint of a model
trained in this process, and loaded back in every format: the shared steps of the export tests."""

from __future__ import annotations

import logging

import numpy as np
import tensorflow as tf
import tf_keras

from cluster.config import PROJECT_ROOT
from cluster.training_parse import parse_training_options
from models import export
from models.compiled import CUSTOM_OBJECTS, build_compiled
from online.publish.exporter import export_checkpoint
from online.publish.request import MODEL, ExportRequest
from tables.streaming import checkpoint_io
from data import source_for

LOG = logging.getLogger("exportkit")


def trained(training: dict, steps: int = 20):
    """(options, source, model) for a run of `training` options (synthetic data), trained `steps` steps here."""
    options = parse_training_options(training)
    source = source_for(options, PROJECT_ROOT)
    tf_keras.utils.set_random_seed(0)
    model = build_compiled(options, source)
    model.fit(source.train_dataset_fn(256, 0)(tf.distribute.InputContext()), steps_per_epoch=steps, epochs=1,
              verbose=0)
    return options, source, model


def exported_and_loaded(options, source, model, tmp_path, *, chunk_bytes: int) -> tuple[np.ndarray, dict]:
    """The model's predictions on 64 raw test inputs, and each exported format's (h5, saved_model, keras) after a
    checkpoint streamed in chunks of `chunk_bytes` was written to tmp_path/model by the exporter."""
    raw, expected, result = exported(options, source, model, tmp_path, chunk_bytes=chunk_bytes)
    loaded = {name: tf_keras.models.load_model(path, custom_objects=CUSTOM_OBJECTS, compile=False)
              for name, path in result.paths.items()}
    return expected, {name: model(raw).numpy() for name, model in loaded.items()}


def exported(options, source, model, tmp_path, *, chunk_bytes: int, checkpoints=None):
    """64 raw test inputs, the model's predictions on them and the exporter's result, after a checkpoint streamed in
    chunks of `chunk_bytes` (into the folder `checkpoints`, tmp_path by default) was written to tmp_path/model."""
    prefix = checkpoint_io.save(tf.train.Checkpoint(model=model, optimizer=model.optimizer),
                                str((checkpoints or tmp_path) / "ckpt-1"), chunk_bytes=chunk_bytes)
    raw = export.reference_inputs(source.split("test", raw=True), count=64)
    expected = model(export.model_inputs(source, raw), training=False).numpy()
    np.savez(tmp_path / "reference.npz", predictions=expected, **export.saved_inputs(raw))
    result = export_checkpoint(ExportRequest(kind=MODEL, checkpoint=prefix, destination=str(tmp_path / "model"),
                                             options={**_as_dict(options), "stream_chunk_mb": chunk_bytes / (1 << 20)},
                                             reference=str(tmp_path / "reference.npz")), LOG)
    assert not result.error and result.largest <= export.TOLERANCE, result
    return raw, expected, result


def _as_dict(options) -> dict:
    import dataclasses
    return dataclasses.asdict(options)


def formats_of(serve, inner, placed, checkpoint: str, directory, *, chunk_bytes: int) -> dict:
    """Template `serve` (around `inner`, with table placeholders `placed`) written in each format from `checkpoint`
    a chunk at a time, and loaded back: {format: loaded model}."""
    from online.publish import keras_files, saved_model
    from tables.streaming.bundle import BundleReader

    fillings = saved_model.load_weights(inner, placed, BundleReader(checkpoint))
    directory.mkdir(parents=True, exist_ok=True)
    keras_files.write_h5(directory / "m.h5", serve, fillings, chunk_bytes=chunk_bytes)
    keras_files.write_keras(directory / "m.keras", serve, fillings, chunk_bytes=chunk_bytes)
    saved_model.write(directory / "saved_model", serve, fillings, chunk_bytes=chunk_bytes)
    return {name: tf_keras.models.load_model(directory / name, custom_objects=CUSTOM_OBJECTS, compile=False)
            for name in ("m.h5", "m.keras", "saved_model")}
