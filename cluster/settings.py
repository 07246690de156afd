"""The `hosts`, `launcher` and `slurm` sections: where tasks run, how the launcher reaches them and heals them."""

from __future__ import annotations

import dataclasses
import re

from cluster.addresses import HOSTNAME, ip_of
from common.errors import Problem
from common.fields import (INT32_MAX, MAX_SECONDS, Check, int_in, is_int, is_number, parse_section, seconds,
                           seconds_check)

USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
SAFE_PATH = re.compile(r"^[A-Za-z0-9_./~+-]+$")
PACKAGE = re.compile(r"^tensorflow(-cpu)?(\[[a-z-]+\])?==[0-9][0-9A-Za-z.]*$")
BACKENDS = ("hosts", "slurm", "kubernetes")
SLURM_NAME = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")
SLURM_TIME = re.compile(r"^(\d+-\d+(:\d+){0,2}|\d+(:\d+){0,2}|UNLIMITED|INFINITE)$")
SBATCH_OPTION = re.compile(r"^--[a-z][a-z-]*(=[A-Za-z0-9_.,:/@%+=\[\]-]+)?$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostSettings:
    """How the launcher reaches a host and what that host's tasks may use."""

    ssh_user: str | None = None
    ssh_port: int = 22
    workdir: str | None = None
    python: str = ".venv/bin/python"
    gpus: tuple[int, ...] = ()
    tf_package: str | None = None
    link_gbps: float | None = None  # this host's network link, for `plan`; null: measured
    link_rtt_ms: float | None = None  # round trip to this host, for `plan`; null: measured
    step_compute_ms: float | None = None  # one training step's compute on this host, for `plan`; null: measured
    cores: float | None = None  # the cores this host's tasks may use, for `plan`; null: asked on the host
    memory_gib: float | None = None  # this host's available memory, for `plan`; null: asked on the host


@dataclasses.dataclass(frozen=True, kw_only=True)
class LauncherSettings:
    """How the launcher reaches hosts, where tasks keep their files, and how it heals the cluster."""

    logs_dir: str = "logs"
    ready_timeout_s: float = 60.0
    ssh_identity: str | None = None
    ssh_known_hosts: str | None = None
    ssh_host_keys: str = "accept-new"
    ssh_connect_timeout_s: int = 10
    max_restarts: int = 3
    restart_backoff_s: float = 2.0
    stall_timeout_s: float = 900.0
    poll_s: float = 1.0
    worker_lost_after_s: float = 300.0  # a worker lost this long leaves the chief's cluster (parameter_server)
    min_workers: int = 1  # fewer running workers hold the chief
    stop_grace_s: float = 60.0  # a stopped chief's time to write its checkpoint before SIGKILL
    log_max_mb: float = 64.0  # a task log larger than this moves to <log>.1 and starts afresh
    log_files_kept: int = 3  # a task's log files kept, the current one included
    backend: str = "hosts"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlurmSettings:
    """The job the slurm backend submits (or the allocation it joins) and how its steps are placed."""

    partition: str | None = None
    time_limit: str | None = None
    account: str | None = None
    nodes: int | None = None  # default: one node per ps and worker, plus one for the chief and evaluator
    cpus_per_task: int = 1
    gpus_per_worker: int = 0
    sbatch_options: tuple[str, ...] = ()
    port_base: int = 22220
    job_name: str = "pscluster"
    start_timeout_s: float = 300.0
    signal_before_end_s: int = 120  # Slurm warns the batch shell this long before the time limit (--signal)


def parse_hosts(hosts: dict, problems: list[Problem]) -> dict[str, HostSettings]:
    parsed = {}
    for name, raw in hosts.items():
        field = f"hosts.{name}"
        if not (HOSTNAME.match(name) or ip_of(name)):
            problems.append(Problem(field, name, "is not a valid host name", "use the host exactly as in cluster"))
        elif not isinstance(raw, dict):
            problems.append(Problem(field, raw, "must be an object", 'use e.g. {"ssh_user": "alice"}'))
        else:
            parsed[name] = parse_section(HostSettings, raw, HOST_CHECKS, f"{field}.", problems)
    return parsed


def _safe_path(example: str) -> Check:
    return Check(lambda v: isinstance(v, str) and bool(SAFE_PATH.match(v)),
                 "paths may hold only letters, digits and _ . / ~ + -", f"use a plain path, e.g. {example}")


def _or_null(check: Check) -> Check:
    return Check(lambda v: v is None or check.accepts(v), check.problem, check.fix)


HOST_CHECKS = {
    "ssh_user": Check(lambda v: v is None or (isinstance(v, str) and bool(USER.match(v))),
                      "user names may hold only a-z, 0-9, '_' and '-'", "fix the user name"),
    "ssh_port": Check(lambda v: is_int(v) and 1 <= v <= 65535, "must be an integer in 1-65535",
                      "use 22 unless sshd listens elsewhere"),
    "workdir": _or_null(_safe_path("/srv/pscluster")),
    "python": _safe_path(".venv/bin/python"),
    "gpus": Check(lambda v: isinstance(v, list) and all(int_in(0, 1023)(g) for g in v),
                  "must be a list of non-negative GPU ids", "use e.g. [0, 1], or [] for CPU only"),
    "tf_package": Check(lambda v: v is None or (isinstance(v, str) and bool(PACKAGE.match(v))),
                        "must be a pinned TensorFlow wheel", "use e.g. tensorflow[and-cuda]==2.21.0, or null for "
                        "the CPU wheel"),
    "link_gbps": Check(lambda v: v is None or (is_number(v) and 0 < v <= 10_000), "must be a number of Gbit/s "
                       "above 0, at most 10000", "use e.g. 10 for 10 GbE, or null to let `plan` measure it"),
    "link_rtt_ms": Check(lambda v: v is None or (is_number(v) and 0 <= v <= 60_000), "must be a number of "
                         "milliseconds from 0 to 60000", "use e.g. 0.2 within a rack, or null to let `plan` measure "
                         "it"),
    "step_compute_ms": Check(lambda v: v is None or (is_number(v) and 0 < v <= 3_600_000), "must be a number of "
                             "milliseconds above 0", "use e.g. 250, or null to let `plan` measure it"),
    "cores": Check(lambda v: v is None or (is_number(v) and 0 < v <= 100_000), "must be a number of cores above 0",
                   "use e.g. 32, or null to let `plan` ask the host"),
    "memory_gib": Check(lambda v: v is None or (is_number(v) and 0 < v <= 1_000_000), "must be a number of GiB "
                        "above 0", "use e.g. 256, or null to let `plan` ask the host"),
}
LAUNCHER_CHECKS = {
    "logs_dir": _safe_path("logs"),
    "ready_timeout_s": seconds_check("60"),
    "ssh_identity": _or_null(_safe_path("~/.ssh/id_ed25519")),
    "ssh_known_hosts": _or_null(_safe_path("~/.ssh/known_hosts")),
    "ssh_host_keys": Check(lambda v: v in ("accept-new", "strict"), "must be accept-new or strict",
                           "use strict to refuse hosts missing from known_hosts, accept-new to record them "
                           "on first contact"),
    "ssh_connect_timeout_s": Check(int_in(1, 3600), "must be a whole number of seconds from 1 to 3600",
                                   "use e.g. 10"),
    "max_restarts": Check(int_in(0, INT32_MAX), f"must be an integer from 0 to {INT32_MAX}",
                          "use e.g. 3 (0 turns healing off)"),
    "restart_backoff_s": seconds_check("2"),
    "stall_timeout_s": Check(seconds, f"must be a positive number of seconds, at most {MAX_SECONDS}",
                             "use longer than the longest pause between optimizer steps, e.g. 900"),
    "poll_s": seconds_check("1"),
    "worker_lost_after_s": seconds_check("300"),
    "min_workers": Check(int_in(1, INT32_MAX), f"must be an integer from 1 to {INT32_MAX}",
                         "use e.g. 1 (the chief trains while at least this many workers run)"),
    "stop_grace_s": seconds_check("60"),
    "log_max_mb": Check(lambda v: is_number(v) and 0 < v <= 1_000_000, "must be a number of MiB above 0, at most "
                        "1000000", "use e.g. 64"),
    "log_files_kept": Check(int_in(1, 1000), "must be an integer from 1 to 1000", "use e.g. 3 (the current log "
                            "and two older ones)"),
    "backend": Check(lambda v: v in BACKENDS, f"must be one of {', '.join(BACKENDS)}",
                     'use "hosts" (this machine and ssh hosts), "slurm" (job steps in a Slurm allocation) or '
                     '"kubernetes" (a JobSet, one pod per task)'),
}


def _slurm_name(example: str) -> Check:
    return Check(lambda v: v is None or (isinstance(v, str) and bool(SLURM_NAME.match(v))),
                 "may hold only letters, digits and _ . + -", f"use the name as Slurm shows it, e.g. {example}")


SLURM_CHECKS = {
    "partition": _slurm_name("gpu"),
    "time_limit": Check(lambda v: v is None or (isinstance(v, str) and bool(SLURM_TIME.match(v))),
                        "is not a Slurm time limit", 'use minutes or [days-]hours:minutes:seconds, e.g. "2:00:00"'),
    "account": _slurm_name("mylab"),
    "nodes": Check(lambda v: v is None or int_in(1, 100_000)(v), "must be a node count from 1 to 100000",
                   "use e.g. 3, or null for one node per ps and worker plus one for the chief"),
    "cpus_per_task": Check(int_in(1, 4096), "must be an integer from 1 to 4096", "use e.g. 4"),
    "gpus_per_worker": Check(int_in(0, 64), "must be an integer from 0 to 64", "use 0 on CPU nodes, e.g. 1 on GPU "
                             "nodes"),
    "sbatch_options": Check(lambda v: isinstance(v, list) and all(isinstance(o, str) and SBATCH_OPTION.match(o)
                                                                  for o in v),
                            "must be a list of --option or --option=value strings without spaces or quotes",
                            'use e.g. ["--qos=normal", "--exclusive"]'),
    "port_base": Check(int_in(1024, 65000), "must be a port from 1024 to 65000",
                       "use e.g. 22220 (tasks take consecutive ports from it)"),
    "job_name": Check(lambda v: isinstance(v, str) and bool(SLURM_NAME.match(v)),
                      "may hold only letters, digits and _ . + -", "use e.g. pscluster"),
    "start_timeout_s": seconds_check("300 (how long the job may wait in the queue)"),
    "signal_before_end_s": Check(int_in(0, 65535), "must be a whole number of seconds from 0 to 65535 (Slurm's "
                                 "--signal limit)", "use e.g. 120: time for the chief to write a checkpoint "
                                 "before the time limit (0: no warning)"),
}


def slurm_minutes(limit: str) -> float | None:
    """A Slurm time (`minutes`, `m:s`, `h:m:s`, `d-h`, `d-h:m`, `d-h:m:s`) in minutes; None for UNLIMITED."""
    if limit.upper() in ("UNLIMITED", "INFINITE", "NONE"):
        return None
    days, _, clock = limit.rpartition("-")
    parts = [float(p) for p in clock.split(":")]
    if days:
        hours, mins, secs = (parts + [0, 0])[:3]
    elif len(parts) == 3:
        hours, mins, secs = parts
    else:
        hours, mins, secs = 0, parts[0], (parts[1] if len(parts) > 1 else 0)
    return float(days or 0) * 1440 + hours * 60 + mins + secs / 60


def check_signal_fits(slurm: SlurmSettings, problems: list[Problem]) -> None:
    """The warning before the time limit must come after the job starts."""
    limit = slurm_minutes(slurm.time_limit) if slurm.time_limit and SLURM_TIME.match(slurm.time_limit) else None
    if limit is not None and slurm.signal_before_end_s and slurm.signal_before_end_s >= limit * 60:
        problems.append(Problem("slurm.signal_before_end_s", slurm.signal_before_end_s,
                                f"is not shorter than slurm.time_limit ({slurm.time_limit})",
                                f"use less than {limit * 60:.0f} s, e.g. a tenth of the time limit"))


def check_gpus_suffice(jobs, hosts: dict[str, HostSettings], problems: list[Problem]) -> None:
    """One worker process per GPU: a host that lists GPUs needs one for each of its workers."""
    for name, settings in hosts.items():
        workers = sum(1 for a in jobs.get("worker", ()) if a.host == name)
        if settings.gpus and workers > len(settings.gpus):
            problems.append(Problem(f"hosts.{name}.gpus", list(settings.gpus),
                                    f"has fewer GPUs than the {workers} workers on {name}",
                                    "list one GPU per worker, or run fewer workers on that host"))
