"""One agent kept running on an ssh host for the launcher's looks at its tasks: a line of task names asked, a line
of JSON answered, through one ssh session that lives as long as it answers, instead of a new ssh session and a new
Python at each look (what each costs: docs/performance.md, "The launcher's watch")."""

from __future__ import annotations

import atexit
import collections
import os
import select
import subprocess
import threading
import time

from launcher.backends.base import AgentFailed, HostUnreachable

SSH_FAILED = 255  # ssh's own exit code: it could not reach the host, or lost it


class AgentSession:
    """`command` (ssh to the host, the agent's `status_lines` there) started at the first question and again after
    it ended; an answer not there within `timeout_s` ends it, and the host counts as unreachable."""

    def __init__(self, name: str, command: list[str], timeout_s: float):
        self.name, self.command, self.timeout_s = name, command, timeout_s
        self._process: subprocess.Popen | None = None
        self._unread = b""
        self._errors: collections.deque[str] = collections.deque(maxlen=20)
        self._lock = threading.Lock()
        self._reading_errors: threading.Thread | None = None
        atexit.register(self.close)

    def ask(self, line: str) -> str:
        """The agent's answer to `line`: HostUnreachable when ssh fails or no answer comes in time, AgentFailed when
        the agent ends on its own."""
        with self._lock:
            if self._process is not None and self._process.poll() is not None:
                self.close()  # ended between questions (a reload, a signal): not a sign of the host now
            process = self._process or self._start()
            try:
                process.stdin.write(line.encode() + b"\n")
                process.stdin.flush()
            except (OSError, ValueError):
                pass  # it ended: said by the read below, with its exit code
            return self._answer(process, time.monotonic() + self.timeout_s)

    def close(self, wait_s: float = 5) -> None:
        """Ends the session (the agent ends at the end of its stdin) and waits for it, killing it if it lingers."""
        process, self._process = self._process, None
        if process is None:
            return
        try:
            process.stdin.close()
        except OSError:
            pass
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _start(self) -> subprocess.Popen:
        self._unread, self._errors = b"", collections.deque(maxlen=20)
        self._process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, start_new_session=True)  # a Ctrl-C is the launcher's
        self._reading_errors = threading.Thread(target=self._keep_errors, args=(self._process, self._errors),
                                                daemon=True)
        self._reading_errors.start()
        return self._process

    @staticmethod
    def _keep_errors(process: subprocess.Popen, errors: collections.deque) -> None:
        for raw in process.stderr:
            errors.append(raw.decode(errors="replace").strip())

    def _answer(self, process: subprocess.Popen, deadline: float) -> str:
        while b"\n" not in self._unread:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close(wait_s=0)  # a host that does not answer would not see the end of its stdin either
                raise HostUnreachable(f"{self.name}: no answer over ssh within {self.timeout_s:.0f} s")
            if select.select([process.stdout], [], [], left)[0]:
                chunk = os.read(process.stdout.fileno(), 1 << 16)
                if not chunk:
                    raise self._ended(process)
                self._unread += chunk
        line, _, self._unread = self._unread.partition(b"\n")
        return line.decode()

    def _ended(self, process: subprocess.Popen) -> Exception:
        """Why the session ended before its answer (the next question starts another)."""
        self.close()
        if self._reading_errors is not None:
            self._reading_errors.join(timeout=2)  # its last lines
        last = ([line for line in self._errors if line] or ["no output"])[-1]
        if process.returncode == SSH_FAILED:
            return HostUnreachable(f"{self.name}: {last}")
        return AgentFailed(f"{self.name}: the agent's status session ended with exit code {process.returncode}: {last}")
