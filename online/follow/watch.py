"""The data folder looked at every `data_poll_s` on a thread of its own, so the chief's loop never waits on a look
(checking that a gzip file is whole reads all of it); each look's findings are queued for the loop. A look that
fails (the folder unreadable: ESTALE, EIO, ENOTCONN on a network filesystem) is queued as a look with that error,
and the next look tries again: the thread ends only when stopped."""

from __future__ import annotations

import queue
import threading

from online.follow.landing import Landing, Look

FOLDER = ""  # the name a look's error is given when the folder itself could not be read


class FolderWatch:
    """Looks when started, then every `poll_s`; `log` gets the traceback of a look that failed for a fault of
    ours (once per kind)."""

    def __init__(self, landing: Landing, poll_s: float, log=None):
        self.landing, self.poll_s, self.log = landing, poll_s, log
        self._faults: set[str] = set()
        self._found: queue.Queue = queue.Queue()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="folder-watch", daemon=True)

    def start(self) -> "FolderWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self._found.put(self.landing.look())
            except OSError as error:
                self._found.put(Look(errors={FOLDER: str(error)}))
            except Exception as error:  # noqa: BLE001 - a fault of ours in one look: said, and the next look tries
                if self.log is not None and type(error).__name__ not in self._faults:
                    self._faults.add(type(error).__name__)
                    self.log.exception("a look at the data folder failed")
                self._found.put(Look(errors={FOLDER: f"{type(error).__name__}: {error}"}))
            self._stopped.wait(self.poll_s)

    def line(self) -> str:
        """What the progress line says of the source beyond the files (nothing, for a folder)."""
        return ""

    def summary(self) -> dict:
        return {}

    def pending(self, untrained_bytes: int) -> None:
        """What the loop has not trained yet: a folder's looks do not wait for it."""

    def looks(self) -> list[Look]:
        """The looks made since the last call, oldest first."""
        return drained(self._found)


def drained(found: queue.Queue) -> list:
    """Everything queued in `found` now, oldest first, without waiting."""
    taken = []
    while True:
        try:
            taken.append(found.get_nowait())
        except queue.Empty:
            return taken
