"""What a process that imported TensorFlow once and forks tasks from it shares with its callers: a forked child's
/proc identity written over, its command run as the interpreter would, its ending, its exit status, and the caller's
handle on a child it did not fork itself (`launcher/fork_server.py`, `online/publish/export_forks.py`)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import runpy
import signal
import subprocess
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Callable

from common.proc import has_live_thread

# /proc/<pid>/stat's fields (after the command's closing parenthesis, from 0) that bound the arguments and the
# environment the kernel shows as /proc/<pid>/cmdline and /proc/<pid>/environ (proc(5): fields 48-51)
ARG_START, ENV_END = 45, 48
PR_SET_PDEATHSIG = 1
STATUS_LATE_S = 5.0  # a forking process reaps an ended child within a fraction of a second, then writes its status


def die_with_parent() -> None:
    """This process is killed when the thread that started it ends (prctl's PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def proc_areas() -> tuple[tuple[int, int], tuple[int, int]]:
    """This process's (start, end) of its arguments' and its environment's memory, as /proc shows them."""
    with open("/proc/self/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    arg_start, arg_end, env_start, env_end = (int(field) for field in fields[ARG_START:ENV_END + 1])
    return (arg_start, arg_end), (env_start, env_end)


def packed(strings: list[str]) -> bytes:
    return b"".join(os.fsencode(text) + b"\0" for text in strings)


def write_area(area: tuple[int, int], data: bytes) -> None:
    """Writes `data` over an area, the rest of it zeros (the kernel shows the whole area)."""
    start, end = area
    ctypes.memmove(start, data.ljust(end - start, b"\0"), end - start)


def command_fits(argv: list[str]) -> bool:
    """Whether `argv` fits the room this process's own command line takes in memory."""
    (start, end), _ = proc_areas()
    return len(packed(argv)) <= end - start


def run_command(argv: list[str]) -> int:
    """Runs `python -m MODULE ARGS`, `python -c CODE ARGS` or `python SCRIPT ARGS` as the interpreter would, as
    __main__ (a script with its folder first on sys.path, code with the current directory, then PYTHONPATH's
    folders); its exit code."""
    if argv[1] == "-m":
        sys.argv = [argv[0], *argv[3:]]  # runpy sets argv[0] to the module's file, as -m does
        return exit_code_of(lambda: runpy.run_module(argv[2], run_name="__main__", alter_sys=True))
    if argv[1] == "-c":
        sys.argv = ["-c", *argv[3:]]
        _start_path("")
        main = sys.modules["__main__"] = types.ModuleType("__main__")
        return exit_code_of(lambda: exec(compile(argv[2], "<string>", "exec"), main.__dict__))
    sys.argv = argv[1:]
    _start_path(os.path.dirname(os.path.abspath(argv[1])))
    return exit_code_of(lambda: runpy.run_path(argv[1], run_name="__main__"))


def _start_path(first: str) -> None:
    """sys.path as the interpreter starts it for a script or code: `first` (in place of this process's own first
    folder), then the folders of this environment's PYTHONPATH, then the rest."""
    sys.path[:1] = [first, *(folder for folder in os.environ.get("PYTHONPATH", "").split(os.pathsep) if folder)]


def exit_code_of(body: Callable[[], object]) -> int:
    """Runs a process's `body`; its exit code as the interpreter would give it."""
    try:
        body()
        return 0
    except SystemExit as ending:
        return _exit_code(ending.code)
    except BaseException:  # what an uncaught error does to a started process: its traceback, exit 1
        traceback.print_exc()
        return 1


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def leave(code: int) -> None:
    """Ends a forked child as the interpreter would (its threads joined, exit handlers run, output flushed), never
    returning to its forking process's code."""
    try:
        import atexit
        import threading
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        ctypes.CDLL(None).fflush(None)  # C's buffered output too
    finally:
        os._exit(code)


def reap(children: dict[int, str | None]) -> None:
    """Reaps the children that ended since the last look, so they leave no zombie, and writes the exit status of
    those given a status file (as subprocess gives it: the code, or minus the killing signal)."""
    for pid, status_path in list(children.items()):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done, status = pid, None
        if not done:
            continue
        del children[pid]
        if status_path and status is not None:
            with contextlib.suppress(OSError):  # its folder gone: no one is left to read it
                with open(status_path + ".part", "w") as written:
                    written.write(str(os.waitstatus_to_exitcode(status)))
                os.replace(status_path + ".part", status_path)


class ForkedChild:
    """A child another process forked, seen by its caller: its exit status is the file the forking process writes
    when it reaps it; the part of subprocess.Popen's interface a caller uses."""

    def __init__(self, pid: int, status_path: Path, args: list[str]):
        self.pid, self.status_path, self.args, self.returncode = pid, status_path, args, None
        self._gone_since: float | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self.status_path.exists():
            self.returncode = int(self.status_path.read_text())
        elif self.returncode is None and not has_live_thread(self.pid):
            self._gone_since = self._gone_since or time.monotonic()
            if time.monotonic() - self._gone_since > STATUS_LATE_S:
                self.returncode = -1  # ended, but its forking process never said how: never taken for a success
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
