"""Starts this machine's tasks by fork from a process that imported TensorFlow once (`launcher/fork_server.py`).

Importing TensorFlow costs each task some 2 CPU-seconds before it does anything; a fork of a process that has
done it costs a few milliseconds. A task is forked when its command is `python -m` one of FORKED_MODULES and the
variables that matter before its first import match the fork server's (one server per interpreter, directory and
such environment, kept for this process's life, or the one another process shares through SHARED_VARIABLE when
it was started so); the rest, and every task whose fork fails, start as before. The
forked task runs in its own session, has its own pid file record and log, and shows its own command line and
environment in /proc, so stopping, healing and `sh kill.sh` treat it as any other.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Mapping, Sequence

from common.exit_file import EXIT_FILE_VARIABLE
from common.proc import start_ticks
from launcher.fork_server import ROOM_VARIABLE
from launcher.process import PidRecord

FORKED_MODULES = frozenset({"roles.server", "coordinator.train", "evaluator.sidecar", "coordinator.calibration"})
# read by a task only after its imports (TF_CONFIG by the cluster resolver, the toolkit's own when its modules run,
# the terminal's by no one before), so a server imported with other values still serves the task
PER_TASK_VARIABLES = frozenset({"TF_CONFIG", EXIT_FILE_VARIABLE, "PYTEST_CURRENT_TEST", "COLUMNS", "LINES"})
PER_TASK_PREFIX = "PSCLUSTER_"  # the toolkit's own variables: the fork server imports none of its modules
# set by TensorFlow's import itself (assigned, or a default no task changes), so the fork server's import made them
# as a started task's would: a launcher run from a process that imported TensorFlow passes them on to its tasks
SET_BY_TENSORFLOW_IMPORT = frozenset({"TF2_BEHAVIOR", "TPU_ML_PLATFORM", "TPU_ML_PLATFORM_VERSION", "HDF5_PLUGIN_PATH",
                                      "ENABLE_RUNTIME_UPTIME_TELEMETRY"})
SHARED_VARIABLE = "PSCLUSTER_FORK_SERVER"  # the socket of a fork server another process shares (ForkServer's `shared`)
ROOM_BYTES = 65536  # of environment, and a tenth of it of command line: a task's own must fit (else it is started)
READY_TIMEOUT_S = 120.0  # the server's import of TensorFlow, on a loaded machine
REPLY_TIMEOUT_S = 30.0  # the server kills a child that has not become its task after 10 s (fork_server.READY_S)


class ForkServer:
    """One running fork server and the lock that keeps its requests one at a time. A `shared` one also listens on
    `socket_path`, where every process given it as SHARED_VARIABLE may fork tasks (the test suite's one server for
    all its launcher runs): start it with a task's environment less PER_TASK_VARIABLES."""

    def __init__(self, python: str, cwd: Path, environment: Mapping[str, str], *, shared: bool = False):
        room = "." * ROOM_BYTES
        folder = tempfile.mkdtemp(prefix="pscluster-fork-") if shared else None  # 0700: this user's alone
        self.socket_path = os.path.join(folder, "socket") if folder else None
        self.process = subprocess.Popen([python, "-m", "launcher.fork_server", room[:ROOM_BYTES // 10],
                                         *([self.socket_path] if folder else [])], cwd=cwd,
                                        env={**environment, ROOM_VARIABLE: room}, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        self.requests, self.replies = self.process.stdin, self.process.stdout
        self.lock = threading.Lock()
        self.ready = "ready" in self._reply(READY_TIMEOUT_S)

    def fork(self, request: dict) -> dict:
        """The server's answer: {"pid": N} for a forked task, else {"error": why}; a server that did not answer is
        stopped (with any child not yet in a session of its own), and the next task starts a new one."""
        with self.lock:
            try:
                self.requests.write((json.dumps(request) + "\n").encode())
                self.requests.flush()
                reply = self._reply(REPLY_TIMEOUT_S)
            except OSError:
                reply = {}
            if not reply:
                self.stop()
            return reply or {"error": "the fork server did not answer"}

    def _reply(self, timeout_s: float) -> dict:
        readable, _, _ = select.select([self.replies], [], [], timeout_s)
        line = self.replies.readline() if readable else b""
        try:
            return json.loads(line)
        except ValueError:
            return {}

    def alive(self) -> bool:
        return self.ready and self.process.poll() is None

    def stop(self) -> None:
        with contextlib.suppress(OSError):  # its group: the server and any child that has not left it yet
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.ready = False
        if self.socket_path:
            shutil.rmtree(os.path.dirname(self.socket_path), ignore_errors=True)


class SharedForkServer(ForkServer):
    """A connection to the fork server another process shares (its socket in SHARED_VARIABLE); `key` is what that
    server was started with, None when it could not be reached."""

    def __init__(self, socket_path: str):  # not super().__init__, which starts a server: this connects to one
        self.lock, self.ready, self.key, self.requests = threading.Lock(), False, None, None
        self.connection = socket.socket(socket.AF_UNIX)
        try:
            self.connection.connect(socket_path)
        except OSError:
            return
        self.requests, self.replies = self.connection.makefile("wb"), self.connection.makefile("rb")
        greeting = self._reply(READY_TIMEOUT_S)
        self.ready = "ready" in greeting
        if self.ready:
            self.key = server_key([greeting["python"]], Path(greeting["cwd"]), greeting["env"])

    def alive(self) -> bool:
        return self.ready

    def stop(self) -> None:  # only this connection: the server is its owner's to stop
        for side in (self.requests, self.replies) if self.requests else ():
            side.close()
        self.connection.close()
        self.ready = False


_servers: dict[tuple, ForkServer] = {}
_servers_lock = threading.Lock()
_unable: set[tuple] = set()  # keys whose server never became ready (say, TensorFlow fails to import): not tried again
_shared: SharedForkServer | None = None  # this process's connection to a shared server (SHARED_VARIABLE)


def server_key(command: Sequence[str], cwd: Path, env: Mapping[str, str]) -> tuple:
    """What a task shares with the fork server that may fork it: interpreter, directory, and its environment but
    for the variables read only after its imports and those its import sets."""
    shared = tuple(sorted((k, v) for k, v in env.items() if k not in PER_TASK_VARIABLES
                          and k not in SET_BY_TENSORFLOW_IMPORT and not k.startswith(PER_TASK_PREFIX)))
    python = os.path.join(cwd, command[0]) if os.sep in command[0] else command[0]  # as the server's sys.executable
    return python, str(cwd), shared


def forkable(command: Sequence[str]) -> bool:
    return len(command) >= 3 and command[1] == "-m" and command[2] in FORKED_MODULES


def _shared_server(key: tuple) -> SharedForkServer | None:
    """The fork server this process was given to share, when tasks of `key` may be forked there."""
    global _shared
    if SHARED_VARIABLE not in os.environ:
        return None
    if _shared is None or not _shared.alive():
        _shared = SharedForkServer(os.environ[SHARED_VARIABLE])
    return _shared if _shared.alive() and _shared.key == key else None


def _server_for(key: tuple) -> ForkServer | None:
    """The fork server for `key`: the shared one if it may fork its tasks, else this process's own, started now if
    none runs; None when one cannot start."""
    with _servers_lock:
        shared = _shared_server(key)
        if shared is not None:
            return shared
        server = _servers.pop(key, None)
        if server is not None and not server.alive():
            server.stop()
            server = None
        if server is None and key not in _unable:
            server = ForkServer(key[0], Path(key[1]), dict(key[2]))
            if not server.alive():
                server.stop()
                _unable.add(key)
                return None
        if server is not None:
            _servers[key] = server
        return server


def start(command: Sequence[str], *, cwd: Path, env: Mapping[str, str], log_path: Path, pid_path: Path,
          status_path: Path | None = None) -> PidRecord | None:
    """Forks the task of `command` and writes its pid file (and, once it ends, its exit status to `status_path`,
    when given); None when it is not forked (start it the usual way)."""
    if not forkable(command):
        return None
    server = _server_for(server_key(command, cwd, env))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    request = {"argv": list(command), "cwd": str(cwd), "env": dict(env), "log": str(log_path)}
    if status_path is not None:
        request["status"] = str(status_path)
    reply = server.fork(request) if server is not None else {}
    if "error" in reply:
        print(f"[launcher] {command[2]} started as a new process, not forked: {reply['error']}",
              file=sys.stderr, flush=True)
    pid = reply.get("pid")
    if pid is None:
        return None
    record = PidRecord(pid, start_ticks(pid) or 0, tuple(command), group=pid)
    record.write(pid_path)
    return record


def stop_all() -> None:
    """Stops every fork server of this process (they also end by themselves when it does)."""
    global _shared
    with _servers_lock:
        for server in [*_servers.values(), *([_shared] if _shared else [])]:
            server.stop()
        _servers.clear()
        _shared = None
