"""The data folder looked at every `data_poll_s` on a thread of its own, so the chief's loop never waits on a look
(checking that a gzip file is whole reads all of it); each look's findings are queued for the loop."""

from __future__ import annotations

import queue
import threading

from coordinator.follow.landing import Landing, Look


class FolderWatch:
    """Looks at once when started, then every `poll_s`; an error in a look (a file that is not data) is
    handed to the loop, which raises it."""

    def __init__(self, landing: Landing, poll_s: float):
        self.landing, self.poll_s = landing, poll_s
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
            except Exception as error:  # noqa: BLE001 - handed to the chief's loop, which raises it
                self._found.put(error)
                return
            self._stopped.wait(self.poll_s)

    def looks(self) -> list[Look]:
        """The looks made since the last call, oldest first."""
        found = []
        while True:
            try:
                item = self._found.get_nowait()
            except queue.Empty:
                return found
            if isinstance(item, Exception):
                raise item
            found.append(item)
