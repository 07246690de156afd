"""Finds a cluster's live processes without their pid files: a task by the exit file its environment names, the
launcher by its command line, so `sh kill.sh` stops them even after the logs folder was deleted.

Every task the launcher starts carries `PSCLUSTER_EXIT_FILE=<logs_dir>/<job>-<index>.exit` in its environment (the
file it writes its exit code to), an absolute path that names this cluster's logs folder and this task, and which
no process of another cluster or of the user carries. /proc keeps a process's environment as it started, whatever
happens to the files: it survives the logs folder, and it is read, never guessed from a process's name.
"""

from __future__ import annotations

import os
from pathlib import Path

from common.exit_file import EXIT_FILE_VARIABLE
from common.proc import has_live_thread, proc_stat, start_ticks
from launcher.process import PidRecord

LAUNCHER_MODULE = "roles.launch"


def _processes():
    """Pids of the live processes this user may read, but this one."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            yield int(entry.name)


def _record(pid: int, *, with_group: bool) -> PidRecord | None:
    """`pid` as a pid file would record it (its process group, if asked), or None when it is gone or a zombie."""
    fields, ticks = proc_stat(pid), start_ticks(pid)
    if fields is None or ticks is None or not has_live_thread(pid):
        return None
    return PidRecord(pid, ticks, tuple(_arguments(pid)), int(fields[2]) if with_group else None)


def _arguments(pid: int) -> list[str]:
    try:
        return [part.decode(errors="replace") for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if part]
    except OSError:
        return []


def _marked(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # gone, or another user's
        return False


def task_groups(exit_file: Path) -> list[PidRecord]:
    """The process groups of live processes started for the task whose exit file is `exit_file` (one record per
    group, its leader's when the leader lives); empty when none runs."""
    marker = f"{EXIT_FILE_VARIABLE}={exit_file}".encode()
    groups: dict[int, PidRecord] = {}
    for pid in _processes():
        record = _record(pid, with_group=True) if _marked(pid, marker) else None
        if record is not None and (record.group not in groups or record.pid == record.group):
            groups[record.group] = record
    return list(groups.values())


def launchers(cluster_file: Path) -> list[PidRecord]:
    """Live `python -m roles.launch run CLUSTER` processes whose cluster file (as seen from their working
    directory) is `cluster_file`: the launcher of a foreground or background run of that file."""
    wanted = cluster_file.resolve()
    found = []
    for pid in _processes():
        arguments = _arguments(pid)
        if LAUNCHER_MODULE not in arguments or "run" not in arguments or "--detach" in arguments:
            continue  # a `run --detach` only starts the launcher and exits
        if pid == os.getppid():
            continue  # the `run --detach` that started this very launcher
        named = _cluster_argument(arguments[arguments.index("run") + 1:])
        if _resolved(pid, named) == wanted and (record := _record(pid, with_group=False)):
            found.append(record)
    return found


def _cluster_argument(after_run: list[str]) -> str:
    """The cluster file a `run` command line names: `run FILE`, `run --cluster FILE`, `run --cluster=FILE`."""
    for index, argument in enumerate(after_run):
        if argument.startswith("--cluster="):
            return argument.split("=", 1)[1]
        if argument == "--cluster":
            return after_run[index + 1] if index + 1 < len(after_run) else "cluster.json"
    positional = [argument for argument in after_run if not argument.startswith("-")]
    return positional[0] if positional else "cluster.json"


def _resolved(pid: int, name: str) -> Path | None:
    try:
        return (Path(os.readlink(f"/proc/{pid}/cwd")) / name).resolve()
    except OSError:
        return None
