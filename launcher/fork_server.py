"""A process that imports TensorFlow once and forks tasks from it, each one as its own command would have started it.

Started by `launcher/task_forks.py` (`python -m launcher.fork_server ROOM`), it reads one JSON request a line on
its standard input ({"argv", "cwd", "env", "log"}: a `python -m MODULE ARGS` task) and answers one JSON line on its
standard output: {"pid": N} once the task runs in a session of its own with its log as stdout and stderr, or
{"error": "..."}, after which the launcher starts that task the usual way. A request that also names a "status"
file has the task's exit status written there once it ends, for a client that is not its parent. A forked task
runs MODULE as `python -m` would, in the task's directory and environment. Its /proc cmdline and environ are
written over the room this process was started with (a long argument and variable), so `ps`, `sh kill.sh` and the
exit-file search find it as if it had been started alone. The server ends when its standard input closes (its
launcher ended) or after IDLE_S with no request and no task of its own running. Started with a socket path as well
(`python -m launcher.fork_server ROOM SOCKET`), it is shared: other processes connect there, are greeted with what
it was started with ({"ready", "python", "cwd", "env"}, so each can tell whether its tasks may be forked here), and
ask as its launcher does; it then ends only when its standard input closes.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import runpy
import select
import signal
import socket
import sys
import time
import traceback

ROOM_VARIABLE = "PSCLUSTER_FORK_ROOM"  # its value is the room a task's environment is written into
IDLE_S = 120.0
REAP_S = 0.2  # how often ended tasks are reaped (and their exit status written, for a request that names a file)
READY_S = 10.0  # a forked child becomes its task in milliseconds; one that has not by then is killed
# /proc/<pid>/stat's fields (after the command's closing parenthesis, from 0) that bound the arguments and the
# environment the kernel shows as /proc/<pid>/cmdline and /proc/<pid>/environ (proc(5): fields 48-51)
ARG_START, ENV_END = 45, 48


def proc_areas() -> tuple[tuple[int, int], tuple[int, int]]:
    """This process's (start, end) of its arguments' and its environment's memory, as /proc shows them."""
    with open("/proc/self/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    arg_start, arg_end, env_start, env_end = (int(field) for field in fields[ARG_START:ENV_END + 1])
    return (arg_start, arg_end), (env_start, env_end)


def packed(strings: list[str]) -> bytes:
    return b"".join(os.fsencode(text) + b"\0" for text in strings)


def environment_of(request: dict) -> bytes:
    return packed([f"{key}={value}" for key, value in request["env"].items()])


def fits(request: dict) -> bool:
    """Whether the task's command line and environment fit the room this process's own take in memory."""
    (arg_start, arg_end), (env_start, env_end) = proc_areas()
    return (len(packed(request["argv"])) <= arg_end - arg_start
            and len(environment_of(request)) <= env_end - env_start)


def write_area(area: tuple[int, int], data: bytes) -> None:
    """Writes `data` over an area, the rest of it zeros (the kernel shows the whole area)."""
    start, end = area
    ctypes.memmove(start, data.ljust(end - start, b"\0"), end - start)


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


def run_module(argv: list[str]) -> int:
    """Runs `python -m MODULE ARGS`'s module as __main__; its exit code as the interpreter would give it."""
    sys.argv = [argv[0], *argv[3:]]  # runpy sets argv[0] to the module's file, as -m does
    try:
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
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
        _leave(run_module(request["argv"]))
    os.close(ready_w)
    became = os.read(ready, 1) if select.select([ready], [], [], READY_S)[0] else b""
    os.close(ready)
    if became == b"1":
        return {"pid": pid, "status": request.get("status")}
    for kill in (os.kill, os.killpg):  # before or after its setsid
        with contextlib.suppress(OSError):
            kill(pid, signal.SIGKILL)
    return {"error": "the forked task did not start (its log may say why)", "child": pid}


def _leave(code: int) -> None:
    """Ends a forked task as the interpreter would (its threads joined, exit handlers run, output flushed), never
    returning to the server's code."""
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


def reap(children: dict[int, str | None]) -> None:
    """Reaps the children that ended since the last look, so they leave no zombie, and writes the exit status of
    those whose request named a status file (as subprocess gives it: the code, or minus the killing signal)."""
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
