"""The run-output contract: every file a run writes under `output_dir`, and typed records to read them back.

The chief (or lead worker) writes checkpoints, TensorBoard train events, the export and `summary.json`; the
evaluator writes `checkpoints/evaluated.json`, validation events and `best_model/`; the launcher and bench read
them. Writers replace JSON files atomically, so a reader never sees half of one; those a reader acts on (the
summary, the best model's record) are flushed to disk first (common/durable.py), so a host crash leaves none empty.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
from pathlib import Path
from typing import Any

from common import durable as durable_files
from common.version import VERSION

RUN_VARIABLE = "PSCLUSTER_RUN"  # names one launcher run: every task it starts carries it; the lead stamps summaries


def this_run() -> str | None:
    """The launcher run this process belongs to (None when it was started by hand)."""
    return os.environ.get(RUN_VARIABLE) or None


class RunStatus(str, enum.Enum):
    RUNNING = "running"
    COMPLETE = "complete"


@dataclasses.dataclass(frozen=True)
class RunFiles:
    """The paths of one run's output directory."""

    output: Path

    @property
    def checkpoints(self) -> Path:
        return self.output / "checkpoints"

    @property
    def evaluated(self) -> Path:
        return self.checkpoints / "evaluated.json"

    @property
    def summary(self) -> Path:
        return self.output / "summary.json"

    @property
    def progress(self) -> Path:
        return self.output / "progress.json"

    @property
    def model_dir(self) -> Path:
        return self.output / "model"

    @property
    def reference_predictions(self) -> Path:
        return self.model_dir / "reference_predictions.npz"

    @property
    def best_dir(self) -> Path:
        return self.output / "best_model"

    @property
    def best_record(self) -> Path:
        return self.best_dir / "best.json"

    @property
    def tensorboard(self) -> Path:
        return self.output / "tensorboard"

    @property
    def train_events(self) -> Path:
        return self.tensorboard / "train"

    @property
    def validation_events(self) -> Path:
        return self.tensorboard / "validation"

    @property
    def serving(self) -> Path:
        """Follow mode's serving versions, output/serving/<version> (TensorFlow Serving's layout)."""
        return self.output / "serving"

    @property
    def quarantine(self) -> Path:
        """Follow mode's report of data not trained (online/follow/quarantine.py)."""
        return self.output / "quarantine.jsonl"

    @property
    def stream(self) -> Path:
        """A followed Kafka topic's records as the chief read them, one file per offset range of a partition, which
        the workers read as they read a followed folder's files (online/follow/topic/)."""
        return self.output / "stream"

    @property
    def backup(self) -> Path:
        return self.output / "backup"

    def scratch(self, worker_index: int) -> Path:
        """Where a non-lead worker writes the saves it must take part in (multi_worker_mirrored), then removes."""
        return self.output / f".worker-{worker_index}"


def write_json_atomically(path: Path, document: Any, *, durable: bool = False) -> None:
    """Writes `document` to `path` whole: under a hidden name, then renamed; with `durable` (what a reader acts on:
    the summary, the best model's record) flushed to disk first. A heartbeat is not: on a busy disk a flush can
    take seconds, and the loop that beats would wait for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(document, indent=2))
    if durable:
        durable_files.publish(partial, path)
    else:
        partial.replace(path)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _from_json(cls, raw: Any):
    """`cls` from a JSON object, ignoring keys it does not know (files of older or newer versions)."""
    if not isinstance(raw, dict):
        return None
    names = {f.name for f in dataclasses.fields(cls)}
    try:
        return cls(**{k: v for k, v in raw.items() if k in names})
    except TypeError:  # a required field is missing: not a file of ours
        return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSummary:
    """`summary.json`: `running` while the lead trains, then everything about the finished run."""

    status: str
    epochs: int
    options: dict = dataclasses.field(default_factory=dict)
    optimizer_steps: int | None = None
    steps_per_epoch: int | None = None
    global_batch: int | None = None
    strategy: str | None = None
    workers: int | None = None
    ps: int | None = None
    train_seconds: float | None = None
    final_metrics: dict = dataclasses.field(default_factory=dict)
    checkpoint: str | None = None
    model: dict = dataclasses.field(default_factory=dict)
    tensorboard: str | None = None
    variable_placement: dict = dataclasses.field(default_factory=dict)
    ps_report: dict = dataclasses.field(default_factory=dict)  # recommenders: per ps, bytes held and moved per step
    capacity: dict = dataclasses.field(default_factory=dict)  # predicted and measured steps/s, the bound (PSS)
    follow: dict = dataclasses.field(default_factory=dict)  # follow mode: files done, examples, freshness per file
    skipped_records: int | None = None  # skip_corrupt: malformed records the workers skipped (None: not counted)
    run: str | None = None  # the launcher run (PSCLUSTER_RUN) whose lead wrote it; None when started by hand
    version: str | None = None  # the release that wrote it (common/version.py); None: before 0.6

    @property
    def complete(self) -> bool:
        return self.status == RunStatus.COMPLETE


def read_summary(files: RunFiles) -> RunSummary | None:
    """The summary, or None when there is none yet (or it cannot be read)."""
    return _from_json(RunSummary, _read_json(files.summary))


def write_summary(files: RunFiles, summary: RunSummary) -> None:
    """Writes `summary`, stamped with the launcher run and the release of the process that writes it."""
    stamped = dataclasses.replace(summary, run=this_run(), version=VERSION)
    write_json_atomically(files.summary, dataclasses.asdict(stamped), durable=True)


def training_finished(files: RunFiles, planned_epochs: int, *, run: str | None = None) -> bool:
    """True once the lead has marked this plan complete (a stale summary of a shorter plan does not count); with
    `run`, only once the lead of that launcher run has (a followed run is complete only until it is started again)."""
    summary = read_summary(files)
    return bool(summary and summary.complete and summary.epochs == planned_epochs
                and (run is None or summary.run == run))


class Phase(str, enum.Enum):
    TRAIN = "train"
    EXPORT = "export"
    WAIT = "wait"  # follow mode, caught up: waiting for data to land (not a stall)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingProgress:
    """`progress.json`: the lead's heartbeat while it trains, so stalls are judged by the optimizer step.

    It also carries what a restarted lead must not lose: `train_s`, the seconds every lead of this output has spent
    training (each up to its last beat), and `epoch_metrics`, those of the last epoch that ended, in whichever life.
    """

    pid: int
    phase: str
    epoch: int
    step: int
    time: float
    train_s: float = 0.0
    epoch_metrics: dict = dataclasses.field(default_factory=dict)


def read_progress(files: RunFiles) -> TrainingProgress | None:
    return _from_json(TrainingProgress, _read_json(files.progress))


def write_progress(files: RunFiles, progress: TrainingProgress) -> None:
    write_json_atomically(files.progress, dataclasses.asdict(progress))


@dataclasses.dataclass(frozen=True, kw_only=True)
class BestRecord:
    """`best_model/best.json`: which checkpoint the evaluator exported as the best, and its metrics."""

    checkpoint: str
    epoch: int
    step: int
    metrics: dict
    best_metric: str
    best_mode: str
    model: dict


def read_best(files: RunFiles) -> BestRecord | None:
    return _from_json(BestRecord, _read_json(files.best_record))


def write_best(files: RunFiles, record: BestRecord) -> None:
    write_json_atomically(files.best_record, dataclasses.asdict(record), durable=True)


NAMES_KEPT = 100  # evaluated.json: names of deleted checkpoints kept; older ones fold into `folded`


@dataclasses.dataclass
class EvaluationState:
    """`checkpoints/evaluated.json`: names done with (evaluated or skipped), results, skip reasons and the best.

    The lead deletes an old checkpoint only once its name is in `evaluated`, and a restarted evaluator skips
    those names, so no checkpoint is evaluated twice. Of the names whose checkpoint is deleted, the newest
    NAMES_KEPT (and the best) stay; older ones fold into a count and `folded_through`, the newest of them (a
    checkpoint at or before it is done), so the file stays a size however many checkpoints a run writes.
    """

    path: Path
    evaluated: list[str] = dataclasses.field(default_factory=list)
    results: dict[str, dict] = dataclasses.field(default_factory=dict)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    best: str | None = None
    folded: int = 0
    folded_through: str | None = None

    @classmethod
    def load(cls, files: RunFiles) -> "EvaluationState":
        raw = _read_json(files.evaluated)
        if not isinstance(raw, dict):
            return cls(files.evaluated)
        return cls(files.evaluated, list(raw.get("evaluated", [])), dict(raw.get("results", {})),
                   dict(raw.get("skipped", {})), raw.get("best"), raw.get("folded", 0), raw.get("folded_through"))

    def save(self) -> None:
        write_json_atomically(self.path, {k: v for k, v in dataclasses.asdict(self).items() if k != "path"})

    def record(self, name: str, result: dict) -> None:
        self.evaluated.append(name)
        self.results[name] = result

    def skip(self, name: str, reason: str) -> None:
        self.evaluated.append(name)
        self.skipped[name] = reason

    def done_count(self) -> int:
        return len(self.evaluated) + self.folded

    def fold(self, listed: set[str], position) -> int:
        """Folds the names of checkpoints not `listed` (deleted), all but the newest NAMES_KEPT and the best, into
        `folded` and `folded_through` (`position(name)` orders checkpoints); returns how many."""
        gone = [name for name in self.evaluated if name not in listed and name != self.best]
        folding = set(gone[:max(0, len(gone) - NAMES_KEPT)])
        if not folding:
            return 0
        self.folded_through = max(folding | {self.folded_through} - {None}, key=position)
        kept = [name for name in self.evaluated if name not in folding]
        self.folded += len(self.evaluated) - len(kept)
        self.evaluated = kept
        self.results = {name: result for name, result in self.results.items() if name not in folding}
        self.skipped = {name: why for name, why in self.skipped.items() if name not in folding}
        return len(folding)
