"""An exporter run as a process of its own (online/publish/exporter.py), started and watched by its caller.

The process is started in its caller's process group (so `sh kill.sh`, which stops a task's group, stops it too)
and is killed if its caller dies first (PR_SET_PDEATHSIG): a half-written artifact is under a hidden name, which
the next start removes. It runs at niceness 10: on a host whose cores training uses (a laptop, the chief beside
workers) a version takes longer and training keeps its pace. Its log lines go to the caller's log, prefixed with
the caller's task. Given the caller's ExportForks (export_forks.py), it is forked from there when it can be, alike
in each of these ways, else started.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from cluster.config import PROJECT_ROOT
from online.publish.export_forks import ExportForks, exporter_command, in_background
from online.publish.request import ExportRequest, ExportResult


class ExportProcess:
    """One exporter process writing what `request` asks; its request and result live in `scratch`."""

    def __init__(self, request: ExportRequest, scratch: Path, forks: ExportForks | None = None):
        scratch.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(prefix=f"export-{request.kind}-", suffix=".json", dir=scratch)
        os.close(handle)
        self.request, self.request_path = request, Path(name)
        self.result_path = self.request_path.with_suffix(".result.json")
        self.status_path = self.request_path.with_suffix(".status")
        request.save(self.request_path)
        self.process = (forks.fork(self.request_path, self.status_path) if forks else None) or subprocess.Popen(
            exporter_command(name), cwd=PROJECT_ROOT, stdin=subprocess.DEVNULL, preexec_fn=in_background)

    def poll(self) -> ExportResult | None:
        """The result once the process has ended, else None."""
        if self.process.poll() is None:
            return None
        return self._result()

    def wait(self, timeout_s: float | None = None) -> ExportResult | None:
        """Waits up to `timeout_s` for the process; its result, or None if it still runs."""
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        return self._result()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._clean()

    def _result(self) -> ExportResult:
        result = ExportResult.load(self.result_path) or ExportResult(
            error=f"the exporter ended with code {self.process.returncode} and no result (see the log above)")
        self._clean()
        return result

    def _clean(self) -> None:
        for path in (self.request_path, self.result_path, self.status_path):
            path.unlink(missing_ok=True)
