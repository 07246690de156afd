"""Exporters forked from one process of the caller's own that has TensorFlow and the exporter imported, so that a
serving version costs a fork rather than an import of TensorFlow (measured: 1.5 CPU-s a version, 4.9 started).

`ExportForks.start(scratch)` makes that process once, as the follow-mode chief starts: a fork of the chief itself
when TensorFlow's runtime has not started there yet and an exporter's command line fits the chief's own in
memory (a chief the launcher forked has room), which costs no import; else `python -m online.publish.export_forks
ROOM REQUESTS REPLIES`, one import for all the run's versions. Either way it is the caller's child, started as an
exporter is (killed with its caller, at niceness 10, in its process group, its output the caller's log). It
answers each request ({"request", "status"}, a JSON line) with {"pid": N} or {"error": ...}. Each exporter it forks
stays in that process group, is killed if the forking process dies, shows
`python -m online.publish.exporter REQUEST` in /proc (written over the forking process's own command line), and
runs the exporter as `python -m` would; its exit status goes to the status file once it is reaped. The forking
process ignores SIGTERM and SIGINT, which a stop sends the whole group (the caller's stop then forks its last
version there too), and ends when its requests' pipe closes or its caller dies. Until it is ready (seconds), and
whenever it is gone or does not answer, the caller starts an exporter as a process of its own: hand-out never
waits for it.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import subprocess
import sys
import traceback
from pathlib import Path

from common.forking import (ForkedChild, command_fits, die_with_parent, exit_code_of, leave, packed, proc_areas,
                            reap, write_area)

EXPORTER_MODULE, MODULE = "online.publish.exporter", "online.publish.export_forks"
EXPORTER_NICENESS = 10  # a version waits for spare CPU; the workers, ps and chief beside it do not
ROOM_BYTES = 4096  # of command line, where each exporter's own is written, when this module is started
REAP_S = 0.2  # how often ended exporters are reaped and their exit status written
REPLY_TIMEOUT_S = 30.0  # a fork takes milliseconds; a forking process that does not answer by then is stopped
# what an export imports beyond TensorFlow and tf_keras, imported before any fork (none starts TensorFlow's runtime)
PREIMPORTED = ("online.publish.exporter", "online.publish.saved_model", "online.publish.template",
               "online.publish.partial", "online.publish.keras_files", "online.publish.versions",
               "online.publish.delta_signatures", "models.export", "models.raw_export", "models.sources",
               "cluster.training_parse", "data.contract", "tables.streaming.bundle", "tables.streaming.rows")


def in_background() -> None:
    """In an exporter or its forking process, before it runs: killed with its caller, and below training in the
    CPU's queue."""
    die_with_parent()
    os.nice(EXPORTER_NICENESS)


def exporter_command(request_path: str) -> list[str]:
    return [sys.executable, "-m", EXPORTER_MODULE, request_path]


class _ForkedHere:
    """The forking process as a fork of the caller: the part of Popen that ExportForks uses."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None and os.waitpid(self.pid, os.WNOHANG)[0]:
            self.returncode = -1
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def wait(self) -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        self.returncode = -1


class ExportForks:
    """The caller's forking process: asked only once it said it is ready."""

    def __init__(self, process, requests_fd: int, replies_fd: int):
        self.process, self.ready = process, False
        self.requests, self.replies = os.fdopen(requests_fd, "wb"), os.fdopen(replies_fd, "rb")

    @classmethod
    def start(cls, scratch: Path, cwd: Path) -> "ExportForks | None":
        """The forking process for exporters whose requests go in `scratch`, forked from here when it can be; None
        when the system refuses a process now (each exporter is then started as a process of its own)."""
        requests_r, requests_w = os.pipe()
        replies_r, replies_w = os.pipe()
        try:
            if _runtime_started() or not command_fits(exporter_command(str(scratch / "export-version-12345678.json"))):
                process = subprocess.Popen([sys.executable, "-m", MODULE, "." * ROOM_BYTES, str(requests_r),
                                            str(replies_w)], cwd=cwd, stdin=subprocess.DEVNULL,
                                           pass_fds=(requests_r, replies_w), preexec_fn=in_background)
            else:
                process = _ForkedHere(_fork_here(requests_r, replies_w, [requests_w, replies_r]))
        except OSError:  # no memory or processes left for it now: the exporters it would fork are started instead
            process = None
        os.close(requests_r)
        os.close(replies_w)
        if process is None:
            os.close(requests_w)
            os.close(replies_r)
            return None
        return cls(process, requests_w, replies_r)

    def fork(self, request_path: Path, status_path: Path) -> ForkedChild | None:
        """An exporter of the request at `request_path` forked, its exit status to go to `status_path`; None when
        none can be now (not ready yet, gone, or not answering: then it is stopped)."""
        if not self.is_ready():
            return None
        try:
            self.requests.write((json.dumps({"request": str(request_path), "status": str(status_path)})
                                 + "\n").encode())
            self.requests.flush()
            reply = self._reply(REPLY_TIMEOUT_S)
        except OSError:
            reply = {}
        if "pid" not in reply:
            if not reply:
                self.stop()
            return None
        return ForkedChild(reply["pid"], status_path, exporter_command(str(request_path)))

    def is_ready(self) -> bool:
        """Whether it runs and has said it is ready (never waits)."""
        if self.process.poll() is not None:
            return False
        self.ready = self.ready or "ready" in self._reply(0)
        return self.ready

    def _reply(self, timeout_s: float) -> dict:
        if not select.select([self.replies], [], [], timeout_s)[0]:
            return {}
        with contextlib.suppress(ValueError):
            return json.loads(self.replies.readline())
        return {}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(OSError):
            self.requests.close()
        self.replies.close()


def _runtime_started() -> bool:
    """Whether TensorFlow's runtime runs in this process (its threads would not survive a fork)."""
    if "tensorflow" not in sys.modules:
        return False
    from tensorflow.python.eager import context
    current = context.context_safe()
    return current is not None and current._context_handle is not None


def _fork_here(requests_fd: int, replies_fd: int, callers_fds: list[int]) -> int:
    """Forks this process into the forking process; its pid."""
    caller = os.getpid()
    flush_output()
    pid = os.fork()
    if pid:
        return pid
    try:
        for fd in callers_fds:
            os.close(fd)
        in_background()
        if os.getppid() != caller:  # the caller died before the line above
            os._exit(0)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        arguments, _ = proc_areas()
        write_area(arguments, packed([sys.executable, "-m", MODULE]))
        serve(requests_fd, replies_fd)
    except BaseException:
        traceback.print_exc()
    os._exit(0)  # never the caller's exit handlers


def fork_exporter(request: dict, private_fds: list[int]) -> dict:
    """Forks an exporter of `request` (it runs the exporter's main, imported here, as `python -m` would); its pid,
    or why not."""
    from online.publish import exporter

    argv = exporter_command(request["request"])
    if not command_fits(argv):
        return {"error": "the request's path is longer than the forking process's command line"}
    forking = os.getpid()
    flush_output()
    pid = os.fork()
    if pid == 0:
        try:
            _become(argv, forking, private_fds)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        leave(exit_code_of(lambda: sys.exit(exporter.main(request["request"]))))
    return {"pid": pid}


def flush_output() -> None:
    """Before a fork: output still buffered would be written again by the child as it ends."""
    sys.stdout.flush()
    sys.stderr.flush()


def _become(argv: list[str], forking: int, private_fds: list[int]) -> None:
    """Turns this forked child into an exporter started as `argv`: killed if its forking process dies, its /proc
    command line its own, SIGTERM and Ctrl-C its own again."""
    die_with_parent()
    if os.getppid() != forking:  # the forking process died before the line above
        os._exit(1)
    for fd in private_fds:
        os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    arguments, _ = proc_areas()
    write_area(arguments, packed(argv))


def serve(requests_fd: int, replies_fd: int) -> None:
    """Imports what an export needs, says it is ready, then forks an exporter for each request until the requests'
    pipe closes."""
    import importlib

    from online.publish.exporter import prepare_process

    for number in (signal.SIGINT, signal.SIGTERM):  # the caller's to act on (a stop's last version is forked here
        signal.signal(number, signal.SIG_IGN)       # too); this process ends with it
    prepare_process()
    for module in PREIMPORTED:
        importlib.import_module(module)
    gc.freeze()  # the imported objects stay out of the collector's reach, so forked exporters share their pages
    os.write(replies_fd, (json.dumps({"ready": os.getpid()}) + "\n").encode())
    children: dict[int, str | None] = {}
    pending = b""
    while True:
        readable = select.select([requests_fd], [], [], REAP_S)[0]
        reap(children)
        chunk = os.read(requests_fd, 65536) if readable else None
        if chunk == b"":
            return
        *lines, pending = (pending + (chunk or b"")).split(b"\n")
        for line in lines:
            os.write(replies_fd, (json.dumps(_answer(line, children, [requests_fd, replies_fd])) + "\n").encode())


def _answer(line: bytes, children: dict[int, str | None], private_fds: list[int]) -> dict:
    """One request's answer; an error here (fork refused, a bad request) is said, never fatal."""
    try:
        request = json.loads(line)
        reply = fork_exporter(request, private_fds)
    except Exception as error:  # the caller then starts the exporter as a process of its own
        return {"error": f"{type(error).__name__}: {error}"}
    if "pid" in reply:
        children[reply["pid"]] = request.get("status")
    return reply


def main() -> None:
    """`python -m online.publish.export_forks ROOM REQUESTS_FD REPLIES_FD`, as ExportForks.start runs it."""
    if len(sys.argv) != 4 or not all(fd.isdigit() for fd in sys.argv[2:]):
        raise SystemExit("usage: python -m online.publish.export_forks ROOM REQUESTS_FD REPLIES_FD (a follow-mode "
                         "chief starts it; it is not run by hand)")
    serve(int(sys.argv[2]), int(sys.argv[3]))
    os._exit(0)  # at once: an interpreter's shutdown with TensorFlow loaded takes seconds, for nothing here


if __name__ == "__main__":
    main()
