"""The follow-mode run's record of what its readers may rely on: which chief writes (its generation), the step served
(nothing older is published), which files a retention job may delete (safe_to_delete.json) and which were deleted
before they were safe.

- **One writer.** Each chief takes the next generation (`output/writers/<n>.json`, created exclusively, so two
  chiefs starting at once take two numbers) and checks before it publishes that no newer one exists: a chief of an
  older generation (a Slurm requeue or a rescheduled pod whose predecessor still runs) publishes nothing and stops.
- **The served step.** What readers were last served: the newest version's step or the read step of its newest
  delta. A restarted chief publishes no version older than it; training has to pass it first.
- **safe_to_delete.json.** The files done in the newest settled checkpoint, the one a resume reads: whatever
  crashes, their training is kept. Written after that checkpoint is on disk, never before.
- **Deleted before safe.** At a resume, a file a version or delta served that the restored checkpoint has not done
  with and that is gone from the folder lost its training: it is counted as lost, with its name.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

from cluster.run_files import write_json_atomically
from common import durable
from common.errors import Problem, UserError
from online.follow import kill_points
from online.follow.file_entry import LOST, FileEntry
from online.follow.ledger import Ledger
from online.publish import delta_format
from online.publish.versions import ServingVersions

SAFE_TO_DELETE = "safe_to_delete.json"
WRITERS = "writers"
WRITERS_KEPT = 10  # older generations' files removed beyond these
RACING_CHIEFS = 1000  # generations a chief tries past the newest it saw before it gives up
FORMAT = 1


class Superseded(UserError):
    """A newer chief writes to this output_dir: this one publishes nothing more."""


class RunRecord:
    """The record of the follow-mode run writing to `output` (its data under `data_root`)."""

    def __init__(self, output: Path, data_root: Path, log):
        self.output, self.data_root, self.log = Path(output), Path(data_root), log
        self.writers = self.output / WRITERS
        self.generation = 0
        self.served_step = 0
        self.served_at = "nothing served yet"
        self._lock = threading.Lock()
        self._pending: tuple[dict, str | None] | None = None
        self._writer: threading.Thread | None = None
        self._served: list[dict] | None = None
        self._looked = float("-inf")

    # ----- one writer ----------------------------------------------------------------------------------------------
    def take_generation(self) -> int:
        """This chief's generation: one more than any taken before (created exclusively: a race takes the next)."""
        self.writers.mkdir(parents=True, exist_ok=True)
        first = max(self._generations(), default=0) + 1
        for number in range(first, first + RACING_CHIEFS):
            try:
                descriptor = os.open(self.writers / f"{number}.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            with os.fdopen(descriptor, "w") as handle:
                json.dump({"generation": number, "host": socket.gethostname(), "pid": os.getpid(),
                           "started": time.time()}, handle)
            durable.sync_file(self.writers / f"{number}.json")
            durable.sync_folder(self.writers)
            break
        else:
            raise UserError(Problem("output_dir", str(self.output), f"{RACING_CHIEFS} chiefs took a generation in "
                                    f"{self.writers} while this one tried", "run one chief per output_dir"))
        self.generation, self._looked = number, time.monotonic()
        for old in sorted(self._generations())[:-WRITERS_KEPT]:
            (self.writers / f"{old}.json").unlink(missing_ok=True)
        return number

    def check_writer(self, every_s: float = 0.0) -> None:
        """Raises Superseded when a chief of a newer generation writes to this output_dir (looked at only when the
        last look is `every_s` old: the loop's beat asks every few seconds, a checkpoint or version each time)."""
        if time.monotonic() - self._looked < every_s:
            return
        self._looked = time.monotonic()
        newest = max(self._generations(), default=self.generation)
        if newest <= self.generation:
            return
        try:
            other = json.loads((self.writers / f"{newest}.json").read_text())
            who = f"on {other.get('host')} (pid {other.get('pid')})"
        except (OSError, ValueError):
            who = "elsewhere"
        raise Superseded(Problem("output_dir", str(self.output),
                                 f"is written by a newer chief now (generation {newest}, {who}); this one "
                                 f"(generation {self.generation}) publishes nothing more and stops",
                                 "run one chief per output_dir: stop this launcher, or give it its own output_dir"))

    def _generations(self) -> list[int]:
        try:
            return [int(p.stem) for p in self.writers.glob("*.json") if p.stem.isdigit()]
        except OSError:
            return []

    # ----- the served step -----------------------------------------------------------------------------------------
    def served_records(self, versions: ServingVersions) -> list[dict]:
        """What readers were served, read once at the start: the newest version's trained_through.json, then each of
        its deltas' manifests as one of the same form (`version`, `written`, `files_done`, the step served)."""
        if self._served is None:
            numbers = versions.versions()
            self._served = [] if not numbers else [
                {**versions.trained_through(numbers[-1]), "served_at": f"version {numbers[-1]}"},
                *({**manifest.get("trained_through", {}), "version": manifest.get("version"),
                   "written": manifest.get("written"), "optimizer_step": manifest.get("read_step", 0),
                   "served_at": f"version {numbers[-1]} delta {manifest.get('sequence')}"}
                  for manifest in _delta_manifests(versions.directory, numbers[-1]))]
        return self._served

    def read_served(self, versions: ServingVersions) -> int:
        """The step readers were last served (newest version, or its newest delta); 0 when nothing is served."""
        for index, record in enumerate(self.served_records(versions)):
            step = int(record.get("optimizer_step", 0))
            if index == 0 or step > self.served_step:  # the version, then a delta serving a later step
                self.served_step, self.served_at = step, record["served_at"]
        return self.served_step

    def served(self, step: int) -> None:
        """Readers are served the training up to `step` now (a version or a delta was published)."""
        if step > self.served_step:
            self.served_step, self.served_at = step, "this run"

    def serves_no_older(self, step: int) -> bool:
        """Whether a version holding the training up to `step` is at least as new as what readers were served."""
        return step >= self.served_step

    # ----- safe to delete ------------------------------------------------------------------------------------------
    def write_safe_to_delete(self, ledger: Ledger, checkpoint: str, step: int, path: str | None = None) -> None:
        """The files done in checkpoint `checkpoint` (a settled one; `path`, its files, are flushed to disk first),
        as a retention job reads them: written on a thread (a flush can take seconds on a busy disk, and the loop
        must not wait), a newer one replacing one not begun; `flush()` waits for the last."""
        names = sorted({name for entry in ledger.files if entry.complete for name in (entry.name, *entry.aliases)})
        document = {"format": FORMAT, "generation": self.generation, "checkpoint": checkpoint, "optimizer_step": step,
                    "written": time.time(), "data_dir": str(self.data_root), "files": names}
        with self._lock:
            self._pending = (document, path)
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_pending, name="safe-to-delete", daemon=True)
                self._writer.start()

    def _write_pending(self) -> None:
        while True:
            with self._lock:
                pending, self._pending = self._pending, None
                if pending is None:
                    self._writer = None
                    return
            document, path = pending
            if path is not None:
                _sync_checkpoint(path)
            write_json_atomically(self.output / SAFE_TO_DELETE, document, durable=True)
            if path is not None:
                kill_points.reached("safe_to_delete")

    def flush(self) -> None:
        """Waits until the newest safe_to_delete.json asked for is written (a run's end, SIGTERM)."""
        with self._lock:
            writer = self._writer
        if writer is not None:
            writer.join()

    def count_deleted_before_safe(self, ledger: Ledger, versions: ServingVersions) -> list[str]:
        """Files served (by the newest version or its deltas) that `ledger`, the restored checkpoint's, has not done
        with and that are gone from the folder: counted lost, with their names; returns the names."""
        held = {name: entry for entry in ledger.files for name in (entry.name, *entry.aliases)}
        newest_landed = max((entry.landed for entry in ledger.files), default=float("-inf"))
        lost = []
        now = time.time()
        for name, item in _served_files(self.served_records(versions)).items():
            entry = held.get(name)
            if entry is None and not _after_the_checkpoint(item, ledger, newest_landed):
                continue  # folded into the ledger's counts: done with in the checkpoint
            if (entry is not None and entry.complete) or (self.data_root / name).exists():
                continue
            note = ("deleted before safe_to_delete.json listed it: served, but not in the checkpoint a resume "
                    "reads, so its training is lost")
            if entry is None:
                entry = ledger.add_gone(FileEntry(name, 0, 0.0, float(item.get("landed") or now), []), now)
            else:
                ledger.gone(name, now)
            ledger.end(entry, LOST, note, now)
            lost.append(name)
        if lost:
            shown = ", ".join(lost[:5]) + (f" and {len(lost) - 5} more" if len(lost) > 5 else "")
            self.log.warning("%d file%s deleted before safe_to_delete.json listed %s: %s; served, but not in the "
                             "checkpoint this run resumes from: counted as lost (a retention job must read %s "
                             "and nothing else)", len(lost), "s" * (len(lost) != 1),
                             "them" if len(lost) != 1 else "it", shown, SAFE_TO_DELETE)
        return lost


def _after_the_checkpoint(item: dict, ledger: Ledger, newest_landed: float) -> bool:
    """Whether a served file the ledger holds no entry of landed after its checkpoint (rather than being folded away
    in it): by its landing number, or, in a record written before they were given, by its landing time."""
    if "seq" in item:
        return item["seq"] >= ledger.next_seq
    return float(item.get("landed") or 0.0) > newest_landed


def _served_files(records: list[dict]) -> dict[str, dict]:
    """name -> its record, of every file the newest version or one of its deltas served (RunRecord.served_records)."""
    served = {}
    for record in records:
        for item in record.get("files_done", []):
            served.setdefault(item["name"], item)
    return served


def _delta_manifests(serving: Path, version: int) -> list[dict]:
    """The manifests of `version`'s deltas on disk (one unreadable is skipped: it was never whole)."""
    folder = serving / delta_format.DIRECTORY
    manifests = []
    for path in sorted(folder.glob(f"{version}.*")) if folder.is_dir() else []:
        if delta_format.parse_delta_name(path.name) is None:
            continue
        try:
            manifests.append(json.loads((path / delta_format.MANIFEST).read_text()))
        except (OSError, ValueError):
            continue
    return manifests


def _sync_checkpoint(prefix: str) -> None:
    """The files of checkpoint `prefix` (its index and data) and their folder on disk: safe_to_delete.json may
    then name what it holds."""
    folder = Path(prefix).parent
    for path in [*folder.glob(Path(prefix).name + ".*"), folder / "checkpoint"]:
        if path.exists():
            durable.sync_file(path)
    durable.sync_folder(folder)
