"""What the follow loop publishes: a serving version from a checkpoint, every `serving_export_every_s` when
something new was trained, checked against the trained model's predictions at that checkpoint."""

from __future__ import annotations

import dataclasses
import time

from cluster.run_files import Phase, read_summary, write_summary
from coordinator import export
from coordinator.compiled import exportable
from coordinator.follow.ledger import Ledger, freshness_summary, trained_through
from coordinator.follow.report import duration
from coordinator.raw_export import servable, signatures


class Publishing:
    """Serving versions of a follow-mode run (a ServingVersions `serving`) and the files each first serves."""

    def __init__(self, *, run, data, model, serving, ledger: Ledger, report, device: str):
        self.run, self.data, self.model, self.serving, self.ledger = run, data, model, serving, ledger
        self.report, self.device = report, device
        self.last_version = time.monotonic()

    def due(self) -> bool:
        return time.monotonic() - self.last_version >= self.run.options.serving_export_every_s

    def reference(self, piece):
        """Raw inputs from `piece` as a reader sends them, and the trained model's predictions on them now (call
        with no piece running: they are what the checkpoint just written predicts)."""
        raw = export.reference_inputs(self.data.piece_examples(piece, raw=True))
        return raw, self.model(export.model_inputs(self.data, raw), training=False).numpy()

    def write(self, checkpoint: str, name: str, number: int, snapshot: Ledger, raw, trained, *,
              against_checkpoint: bool = False) -> None:
        """Checkpoint `checkpoint` (named `name`, at step `number`, holding ledger `snapshot`) restored whole, as
        exported (taking raw features), checked against `trained` and written as the next serving version. With
        `against_checkpoint` (pieces ran on while it was written, so `trained` is not the checkpoint's model), it
        is checked against the checkpoint restored whole instead: the export's own inputs and outputs."""
        options = self.run.options
        self.report.beat(Phase.EXPORT, force=True)
        whole = export.restore_whole(options, self.data, checkpoint, device=self.device, io_device=self.device)
        if against_checkpoint:
            trained = whole(export.model_inputs(self.data, raw), training=False).numpy()
        exported = servable(exportable(whole), self.data)
        largest = export.check_export(trained, exported(raw, training=False).numpy())
        step = int(self.model.optimizer.iterations.numpy())
        version, path = self.serving.write(
            exported, inputs=raw, predictions=trained, signatures=signatures(exported, self.data),
            describe=lambda v, t: trained_through(snapshot, version=v, written=t, checkpoint=name, step=number))
        served = self.ledger.serve(version, self.serving.trained_through(version)["written"],
                                   names={e.name for e in snapshot.files if e.complete})
        freshness = duration(served[-1].freshness_s) if served else "-"
        self.run.log.info("serving | version %d | %s | %d file%s newly served | freshness %s | export check %.1e | "
                          "%s", version, name, len(served), "s" * (len(served) != 1), freshness, largest, path)
        self.last_version = time.monotonic()
        summary = read_summary(self.run.files)
        if summary is not None:
            write_summary(self.run.files, dataclasses.replace(summary, optimizer_steps=step,
                                                              follow=freshness_summary(self.ledger)))
