"""The end of a fixed-data run: output/model written from the last checkpoint on a thread of the chief (training is
over: nothing waits on it, and a process of its own would load TensorFlow once more), while the chief keeps its
heartbeat (an export is not a stall), and checked against the trained model's predictions."""

from __future__ import annotations

import dataclasses
import shutil
import threading
from pathlib import Path
from typing import Callable

import numpy as np

from common.errors import Problem, UserError
from models import export
from online.publish import exporter
from online.publish.request import MODEL, ExportRequest, ExportResult

SCRATCH = ".exports"  # under output_dir: the request and reference predictions of an export being written
BEAT_EVERY_S = 2.0


def remove_leftovers(run) -> None:
    """What an export of TrainingRun `run` that died midway left: its scratch and a half-written model folder
    (an old model/ it had set aside goes back in place)."""
    shutil.rmtree(run.files.output / SCRATCH, ignore_errors=True)
    exporter.remove_leftovers(run.files.model_dir)


def export_model(run, checkpoint: str, raw, trained, *, beat: Callable[[], None]) -> ExportResult:
    """Writes checkpoint `checkpoint` of TrainingRun `run` to output/model (h5, SavedModel, .keras) a chunk of each
    table at a time, checked against `trained`, the trained model's predictions on raw inputs `raw`; `beat` runs
    every BEAT_EVERY_S."""
    scratch = run.files.output / SCRATCH
    scratch.mkdir(parents=True, exist_ok=True)
    reference = scratch / "reference-model.npz"
    np.savez(reference, predictions=trained, **export.saved_inputs(raw))
    request = ExportRequest(kind=MODEL, checkpoint=checkpoint, destination=str(run.files.model_dir),
                            options=dataclasses.asdict(run.options), reference=str(reference),
                            task=run.config.lead.name)
    answered: list[ExportResult] = []
    writer = threading.Thread(target=lambda: answered.append(exporter.answer(request, run.log)), daemon=True,
                              name="export")  # its own thread: no strategy or variable scope of training's
    writer.start()
    try:
        while writer.is_alive():
            beat()
            writer.join(BEAT_EVERY_S)
    finally:
        reference.unlink(missing_ok=True)
    result = answered[0] if answered else ExportResult(error="the export ended without a result (see the log above)")
    if result.error:
        fix = ("keep the checkpoints and logs and report it" if result.fatal else
               "fix what it names and run `sh run.sh` again: the finished run exports from its last checkpoint")
        raise UserError(Problem("export", Path(checkpoint).name, result.error, fix))
    return result
