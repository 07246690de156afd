"""Under Kubernetes with an output volume, a chief connects only to ps that hold nothing of an earlier chief.

A chief's Job replaces its pod alone (a crash, exit 4, a disruption), and a ps still up would keep the dead chief's
tables beside the new one's until TensorFlow's keep-alive (600 s) runs out: twice its share. So before it connects
each chief writes a new generation into `output_dir/.generations/chief` (the volume every pod mounts) and waits
until every ps has taken it; a ps takes the first generation it sees, and when a newer one appears it exits with
CHIEF_REPLACED_EXIT_CODE, which its Job's podFailurePolicy ignores: the pod is replaced, not counted, and the new ps
takes the new generation. Elsewhere the launcher restarts every ps with the chief itself.
"""

from __future__ import annotations

import os
import secrets
import sys
import threading
import time
from pathlib import Path

from common import durable
from common.errors import CHIEF_REPLACED_EXIT_CODE, CLUSTER_UNAVAILABLE_EXIT_CODE

FOLDER = ".generations"
CHIEF = "chief"
POLL_S = 0.5
SAY_EVERY_S = 15.0


def applies(config) -> bool:
    """Whether ClusterConfig `config` runs its ps under Kubernetes with an output volume every pod shares."""
    return (config.launcher.backend == "kubernetes" and bool(config.kubernetes.output_volume)
            and bool(config.jobs.get("ps")))


def folder_of(config) -> Path:
    return Path(config.path(config.training.output_dir)) / FOLDER


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _write(path: Path, text: str) -> None:
    """Whole or not at all: written under a hidden name, flushed, then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    hidden = path.with_name(f".{path.name}.{os.getpid()}")
    hidden.write_text(text)
    durable.publish(hidden, path)


def start_generation(config, timeout_s: float, log) -> None:
    """The chief's side: a new generation, then a wait (at most `timeout_s`) until every ps has taken it; a ps
    that does not is named, and the chief exits with CLUSTER_UNAVAILABLE_EXIT_CODE (its Job starts it again)."""
    folder, count = folder_of(config), len(config.jobs["ps"])
    generation = f"{time.time():.3f}-{secrets.token_hex(4)}"
    _write(folder / CHIEF, generation)
    log.info("chief generation %s: waiting for every ps to take it (a ps that served an earlier chief is "
             "replaced first: it would hold that chief's tables beside this one's)", generation)
    started = said = time.monotonic()
    while True:
        behind = [i for i in range(count) if _read(folder / f"ps-{i}") != generation]
        if not behind:
            return
        now = time.monotonic()
        if now - started >= timeout_s:
            for index in behind:
                print(f"error: ps:{index} did not take chief generation {generation} within {timeout_s:.0f} s "
                      f"({folder / f'ps-{index}'}); check that its pod runs and mounts the output volume",
                      file=sys.stderr)
            sys.exit(CLUSTER_UNAVAILABLE_EXIT_CODE)
        if now - said >= SAY_EVERY_S:
            log.info("waiting for ps %s to take chief generation %s (%.0f s)", ", ".join(map(str, behind)),
                     generation, now - started)
            said = now
        time.sleep(POLL_S)


class PsGeneration:
    """A ps's side: takes the first chief generation it sees and exits with CHIEF_REPLACED_EXIT_CODE on a newer
    one, checked every POLL_S on a thread of its own."""

    def __init__(self, config, index: int, log, exit=os._exit):
        self.folder, self.index, self.log, self.exit = folder_of(config), index, log, exit
        self.taken: str | None = None

    def start(self) -> "PsGeneration":
        threading.Thread(target=self._watch, name="chief-generation", daemon=True).start()
        return self

    def _watch(self) -> None:
        while self.check():
            time.sleep(POLL_S)

    def check(self) -> bool:
        """One look: True while this ps serves the newest generation (or none was written yet)."""
        newest = _read(self.folder / CHIEF)
        if newest is None or newest == self.taken:
            return True
        if self.taken is None:
            self.taken = newest
            _write(self.folder / f"ps-{self.index}", newest)
            self.log.info("serving chief generation %s", newest)
            return True
        self.log.info("a new chief started (generation %s after %s): exiting %d so that this pod is replaced "
                      "holding nothing of the old one", newest, self.taken, CHIEF_REPLACED_EXIT_CODE)
        sys.stderr.flush()
        self.exit(CHIEF_REPLACED_EXIT_CODE)
        return False
