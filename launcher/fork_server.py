"""A process that imports TensorFlow once and forks tasks from it, each one as its own command would have started it.

Started by `launcher/task_forks.py` (`python -m launcher.fork_server ROOM`), it reads one JSON request a line on
its standard input ({"argv", "cwd", "env", "log"}: a `python -m MODULE ARGS` task, or a `python -c CODE ARGS` or
`python SCRIPT ARGS` command, as the test suite forks its helpers) and answers one JSON line on its
standard output: {"pid": N} once the task runs in a session of its own with its log as stdout and stderr, or
{"error": "..."}, after which the launcher starts that task the usual way. A request that also names a "status"
file has the task's exit status written there once it ends, for a client that is not its parent. A forked task
runs its command as the interpreter would, in the task's directory and environment. Its /proc cmdline and environ are
written over the room this process was started with (a long argument and variable), so `ps`, `sh kill.sh` and the
exit-file search find it as if it had been started alone. The server ends when its standard input closes (its
launcher ended) or after IDLE_S with no request and no task of its own running. Started with a socket path as well
(`python -m launcher.fork_server ROOM SOCKET`), it is shared: other processes connect there, are greeted with what
it was started with ({"ready", "python", "cwd", "env"}, so each can tell whether its tasks may be forked here), and
ask as its launcher does; it then ends only when its standard input closes.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import socket
import sys
import time
import traceback

from common.forking import leave, packed, proc_areas, reap, run_command, write_area

ROOM_VARIABLE = "PSCLUSTER_FORK_ROOM"  # its value is the room a task's environment is written into
IDLE_S = 120.0
REAP_S = 0.2  # how often ended tasks are reaped (and their exit status written, for a request that names a file)
READY_S = 10.0  # a forked child becomes its task in milliseconds; one that has not by then is killed


def environment_of(request: dict) -> bytes:
    return packed([f"{key}={value}" for key, value in request["env"].items()])


def fits(request: dict) -> bool:
    """Whether the task's command line and environment fit the room this process's own take in memory."""
    (arg_start, arg_end), (env_start, env_end) = proc_areas()
    return (len(packed(request["argv"])) <= arg_end - arg_start
            and len(environment_of(request)) <= env_end - env_start)


def become(request: dict, ready_fd: int, private_fds: list[int]) -> None:
    """Turns this forked child into the task: its session, files, directory, environment and /proc identity; then
    says so on `ready_fd`."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for source, target in ((null, 0), (log, 1), (log, 2)):
        os.dup2(source, target)
    for fd in (null, log, *private_fds):
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()  # libc's environment now lives on the heap: the area below is free to write over
    os.environ.update(request["env"])
    arguments, environment = proc_areas()
    write_area(arguments, packed(request["argv"]))
    write_area(environment, environment_of(request))
    if "numpy" in sys.modules:  # each task its own random state, as a started process has (random reseeds itself)
        sys.modules["numpy"].random.seed()
    os.write(ready_fd, b"1")
    os.close(ready_fd)


def fork_task(request: dict, private_fds: list[int]) -> dict:
    """Forks the task of `request` (`private_fds`, this server's own, closed in it); its pid once it runs as the
    task, or why it could not (a child that did not become the task within READY_S is killed)."""
    if not fits(request):
        return {"error": "its command line or environment is larger than the fork server's room"}
    ready, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            become(request, ready_w, [ready, *private_fds])
        except BaseException:
            traceback.print_exc()  # to the task's log once it is fd 2
            os._exit(1)
        leave(run_command(request["argv"]))
    os.close(ready_w)
    became = os.read(ready, 1) if select.select([ready], [], [], READY_S)[0] else b""
    os.close(ready)
    if became == b"1":
        return {"pid": pid, "status": request.get("status")}
    for kill in (os.kill, os.killpg):  # before or after its setsid
        with contextlib.suppress(OSError):
            kill(pid, signal.SIGKILL)
    return {"error": "the forked task did not start (its log may say why)", "child": pid}


def answer(fd: int, reply: dict) -> None:
    with contextlib.suppress(OSError):  # a client that went away (its task, if forked, runs on)
        os.write(fd, (json.dumps(reply) + "\n").encode())


def greeting(environment: dict) -> dict:
    """What a process connecting to a shared server is told: what tasks forked here have imported with (the
    environment as it was before the import, which adds variables of TensorFlow's own)."""
    return {"ready": os.getpid(), "python": sys.executable, "cwd": os.getcwd(),
            "env": {key: value for key, value in environment.items() if key != ROOM_VARIABLE}}


def handle(request_line: bytes, private_fds: list[int]) -> dict:
    """One request's answer; an error of this process (fork refused, a bad request) is said, never fatal."""
    try:
        return fork_task(json.loads(request_line), private_fds)
    except Exception as error:  # the launcher then starts the task as before
        return {"error": f"{type(error).__name__}: {error}"}


class Requests:
    """Where requests come from: standard input (answered on the protocol fd) and, when shared, each connection to
    the listening socket (answered on it); each with its unread part of a line."""

    def __init__(self, protocol_fd: int, listener: socket.socket | None, environment: dict):
        self.listener, self.answers, self.pending = listener, {0: protocol_fd}, {0: b""}
        self.greeting = greeting(environment)

    def sources(self) -> list:
        return [*self.answers, *([self.listener] if self.listener else [])]

    def private_fds(self) -> list[int]:
        listening = [self.listener.fileno()] if self.listener else []
        return [*listening, *self.answers.values()]  # the protocol fd and each connection's

    def accept(self) -> None:
        connection = self.listener.accept()[0].detach()
        self.answers[connection], self.pending[connection] = connection, b""
        answer(connection, self.greeting)

    def lines(self, fd: int) -> list[bytes] | None:
        """The whole lines that came on `fd`; None when it closed (a connection is then forgotten)."""
        chunk = b""
        with contextlib.suppress(OSError):
            chunk = os.read(fd, 65536)
        if not chunk:
            if fd:
                os.close(fd)
                del self.answers[fd], self.pending[fd]
            return None
        *whole, self.pending[fd] = (self.pending[fd] + chunk).split(b"\n")
        return whole


def serve(protocol_fd: int, listener: socket.socket | None, environment: dict) -> None:
    """Answers requests until standard input closes, or (not shared) after IDLE_S without one while no task of its
    own runs."""
    requests, children, last_request = Requests(protocol_fd, listener, environment), {}, time.monotonic()
    while True:
        readable, _, _ = select.select(requests.sources(), [], [], REAP_S)
        reap(children)
        if not readable and not listener and not children and time.monotonic() - last_request > IDLE_S:
            return
        for source in readable:
            if source is listener:
                requests.accept()
                continue
            lines = requests.lines(source)
            if lines is None and source == 0:
                return
            for line in lines or []:
                reply = handle(line, requests.private_fds())
                children.update({reply[key]: reply.get("status") for key in ("pid", "child") if key in reply})
                answer(requests.answers[source], {"pid": reply["pid"]} if "pid" in reply else
                       {"error": reply["error"]})
                last_request = time.monotonic()


def _listening(path: str) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)  # in a folder of the sharing process's own (tasks_forks.share), readable by it alone
    listener.listen()
    return listener


def main() -> None:
    protocol_fd = os.dup(1)  # answers go here; stdout is /dev/null, so nothing printed on import can garble them
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    environment = dict(os.environ)
    import tensorflow  # noqa: F401  the point of this process: every task forked from here has it imported

    listener = _listening(sys.argv[2]) if len(sys.argv) > 2 else None
    gc.freeze()  # the imported objects stay out of the collector's reach, so forked tasks share their pages
    answer(protocol_fd, {"ready": os.getpid()})
    serve(protocol_fd, listener, environment)
    os._exit(0)  # at once: an interpreter's shutdown with TensorFlow loaded takes seconds, for nothing here


if __name__ == "__main__":
    main()
