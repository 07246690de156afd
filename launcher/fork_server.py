"""A process that imports TensorFlow once and forks tasks from it, each one as its own command would have started it.

Started by `launcher/task_forks.py` (`python -m launcher.fork_server ROOM`), it reads one JSON request a line on
its standard input ({"argv", "cwd", "env", "log"}: a `python -m MODULE ARGS` task) and answers one JSON line on its
standard output: {"pid": N} once the task runs in a session of its own with its log as stdout and stderr, or
{"error": "..."}, after which the launcher starts that task the usual way. A forked task then runs MODULE as
`python -m` would, in the task's directory and environment. Its /proc cmdline and environ are written over the
room this process was started with (a long argument and variable), so `ps`, `sh kill.sh` and the exit-file search
find it as if it had been started alone. The server ends when its standard input closes (its launcher ended) or
after IDLE_S with no request and no task of its own running.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import random
import runpy
import select
import sys
import time
import traceback

ROOM_VARIABLE = "PSCLUSTER_FORK_ROOM"  # its value is the room a task's environment is written into
IDLE_S = 120.0
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
    return b"".join(text.encode() + b"\0" for text in strings)


def fits(request: dict) -> bool:
    """Whether the task's command line and environment fit the room this process's own take in memory."""
    (arg_start, arg_end), (env_start, env_end) = proc_areas()
    environment = packed([f"{key}={value}" for key, value in request["env"].items()])
    return len(packed(request["argv"])) <= arg_end - arg_start and len(environment) <= env_end - env_start


def write_area(area: tuple[int, int], data: bytes) -> None:
    """Writes `data` over an area, the rest of it zeros (the kernel shows the whole area)."""
    start, end = area
    ctypes.memmove(start, data.ljust(end - start, b"\0"), end - start)


def become(request: dict, ready_fd: int) -> int:
    """Turns this forked child into the task: its session, files, directory, environment and /proc identity, then
    runs its module as __main__; returns its exit code."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for source, target in ((null, 0), (log, 1), (log, 2)):
        os.dup2(source, target)
    os.close(null)
    os.close(log)
    os.chdir(request["cwd"])
    os.environ.clear()  # libc's environment now lives on the heap: the area below is free to write over
    os.environ.update(request["env"])
    arguments, environment = proc_areas()
    write_area(arguments, packed(request["argv"]))
    write_area(environment, packed([f"{key}={value}" for key, value in request["env"].items()]))
    random.seed()  # each task its own random state, as a started process has
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    os.write(ready_fd, b"1")
    os.close(ready_fd)
    module = request["argv"][2]
    sys.argv = [request["argv"][0], *request["argv"][3:]]  # runpy sets argv[0] to the module's file, as -m does
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
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


def fork_task(request: dict) -> dict:
    """Forks the task of `request`; its pid once it runs as the task, or why it could not."""
    if not fits(request):
        return {"error": "its command line or environment is larger than the fork server's room"}
    ready, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(ready)
            code = become(request, ready_w)
        finally:
            _leave(code)
    os.close(ready_w)
    became = os.read(ready, 1)
    os.close(ready)
    return {"pid": pid} if became == b"1" else {"error": "the forked task ended before it started"}


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
    finally:
        os._exit(code)


def answer(reply: dict) -> None:
    os.write(1, (json.dumps(reply) + "\n").encode())


def serve() -> None:
    """Answers requests until standard input closes, or until IDLE_S without one while no task of its own runs."""
    pending, children, last_request = b"", set(), time.monotonic()
    while True:
        readable, _, _ = select.select([0], [], [], 1.0)
        children -= reaped(children)
        if not readable:
            if not children and time.monotonic() - last_request > IDLE_S:
                return
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            reply = fork_task(json.loads(line))
            children |= {reply["pid"]} if "pid" in reply else set()
            answer(reply)
            last_request = time.monotonic()


def reaped(children: set[int]) -> set[int]:
    """The children that ended since the last look, reaped so they leave no zombie."""
    gone = set()
    for pid in children:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            gone.add(pid)
    return gone


def main() -> None:
    import tensorflow  # noqa: F401  the point of this process: every task forked from here has it imported

    gc.freeze()  # the imported objects stay out of the collector's reach, so forked tasks share their pages
    answer({"ready": os.getpid()})
    serve()
    os._exit(0)  # at once: an interpreter's shutdown with TensorFlow loaded takes seconds, for nothing here


if __name__ == "__main__":
    main()
