"""cluster.json → a frozen, validated ClusterConfig; every problem in the file is reported at once."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from coordinator.options import MULTI_WORKER_MIRRORED, PARAMETER_SERVER, TrainingOptions, parse_training_options
from evaluator.options import EvaluationOptions, parse_evaluation_options
from roles import crosschecks, jsonfile
from roles.errors import Problem, UserError
from roles.fields import INT32_MAX, MAX_SECONDS, Check, int_in, is_int, parse_section, seconds, seconds_check

PROJECT_ROOT = Path(__file__).resolve().parent.parent
JOBS = ("chief", "worker", "ps", "evaluator")
TRAINING_JOBS = ("chief", "worker", "ps")
TOP_LEVEL_KEYS = ("$schema", "cluster", "hosts", "training", "evaluation", "launcher", "security")
LOOPBACK_NAMES = ("localhost",)

LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){LABEL}(\.{LABEL})*$")
ADDRESS = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[^:\[\]]+):(?P<port>[^:]*)$")
USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
SAFE_PATH = re.compile(r"^[A-Za-z0-9_./~+-]+$")
PACKAGE = re.compile(r"^tensorflow(-cpu)?(\[[a-z-]+\])?==[0-9][0-9A-Za-z.]*$")


@dataclasses.dataclass(frozen=True, order=True)
class Address:
    """A `host:port` from the cluster section."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def is_loopback(self) -> bool:
        return self.host.lower().rstrip(".") in LOOPBACK_NAMES or _ip_is(self.host, "is_loopback")

    @property
    def place(self) -> tuple[str, int]:
        """Where the port really is: loopback and unspecified (0.0.0.0, ::) names are all this machine, IP
        spellings are normalised (::ffff:10.0.0.1 is 10.0.0.1), host names compare without case."""
        ip = _ip(self.host)
        ip = ip.ipv4_mapped or ip if isinstance(ip, ipaddress.IPv6Address) else ip
        if self.is_loopback or (ip and ip.is_unspecified) or (ip and ip.is_loopback):
            return ("this machine", self.port)
        return (str(ip) if ip else self.host.lower().rstrip("."), self.port)


@dataclasses.dataclass(frozen=True)
class Task:
    """One process of the cluster: its job, index and address."""

    job: str
    index: int
    address: Address

    @property
    def name(self) -> str:
        return f"{self.job}:{self.index}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostSettings:
    """How the launcher reaches a host and what that host's tasks may use."""

    ssh_user: str | None = None
    ssh_port: int = 22
    workdir: str | None = None
    python: str = ".venv/bin/python"
    gpus: tuple[int, ...] = ()
    tf_package: str | None = None


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    """The whole validated cluster.json; nothing downstream reads the JSON again."""

    source: Path
    jobs: Mapping[str, tuple[Address, ...]]
    hosts: Mapping[str, HostSettings]
    training: TrainingOptions
    evaluation: EvaluationOptions
    launcher: LauncherSettings
    allow_public_addresses: bool = False
    firewall: bool = False

    def tasks(self, jobs: tuple[str, ...] = JOBS) -> list[Task]:
        return [Task(job, i, a) for job in jobs for i, a in enumerate(self.jobs.get(job, ()))]

    def task(self, job: str, index: Any) -> Task:
        """Looks a task up, raising a UserError naming the valid indices when it does not exist."""
        if job not in JOBS:
            raise UserError(Problem("--role", job, "unknown role", f"use one of {', '.join(JOBS)}"))
        addresses = self.jobs.get(job, ())
        if not (isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(addresses)):
            valid = f"0..{len(addresses) - 1}" if addresses else "none"
            raise UserError(Problem("--index", index, f"{self.source.name} has {len(addresses)} {job} task(s)",
                                    f"use an index in {valid}"))
        return Task(job, index, addresses[index])

    def host(self, name: str) -> HostSettings:
        return self.hosts.get(name, HostSettings())

    def path(self, relative: str) -> Path:
        """Resolves a path from the file against the project directory (a remote host's workdir there)."""
        return (PROJECT_ROOT / Path(relative).expanduser()).resolve()


def load(path: str | Path) -> ClusterConfig:
    """Reads and validates cluster.json, raising one UserError that lists every problem."""
    path = Path(str(path))  # Fire turns a file named 123 into an int
    return parse(jsonfile.read_document(path), path)


def parse(raw: Any, source: Path) -> ClusterConfig:
    """Validates an already-decoded cluster.json document."""
    if not isinstance(raw, dict):
        raise UserError(Problem("document", type(raw).__name__, "must be a JSON object",
                                "start from the shipped cluster.json"), source=str(source))
    problems = [Problem(key, raw[key], "unknown top-level key", f"use only {', '.join(TOP_LEVEL_KEYS)}")
                for key in raw if key not in TOP_LEVEL_KEYS]
    security = _section(raw, "security", problems)
    for key in security:
        if key not in ("allow_public_addresses", "firewall"):
            problems.append(Problem(f"security.{key}", security[key], "unknown setting",
                                    "use allow_public_addresses or firewall"))
    allow_public = security.get("allow_public_addresses", False)
    if not isinstance(allow_public, bool):
        problems.append(Problem("security.allow_public_addresses", allow_public, "must be true or false",
                                "use false unless the cluster must span public addresses"))
        allow_public = False
    firewall = security.get("firewall", False)
    if not isinstance(firewall, bool):
        problems.append(Problem("security.firewall", firewall, "must be true or false",
                                "use true to let only cluster members reach task ports (needs root)"))
        firewall = False
    training_problems: list[Problem] = []  # parsed first (the strategy decides which jobs are needed), told later
    training = _parse_or_collect(parse_training_options, _section(raw, "training", training_problems),
                                 training_problems)
    strategy = training.strategy if training else PARAMETER_SERVER
    jobs = _parse_cluster(raw.get("cluster"), allow_public is True, strategy, problems)
    hosts = _parse_hosts(_section(raw, "hosts", problems), problems)
    _check_gpus_suffice(jobs, hosts, problems)
    launcher = parse_section(LauncherSettings, _section(raw, "launcher", problems), LAUNCHER_CHECKS, "launcher.",
                             problems)
    problems += training_problems
    evaluation = _parse_or_collect(parse_evaluation_options, _section(raw, "evaluation", problems), problems)
    if not problems:  # checks across sections, once each section is right (no echoes of a section's mistake)
        problems += _cross_section_problems(jobs, hosts, training, evaluation, launcher)
    if problems:
        raise UserError(problems, source=str(source))
    return ClusterConfig(source=source.resolve(), jobs=MappingProxyType(jobs), hosts=MappingProxyType(hosts),
                         training=training, evaluation=evaluation, launcher=launcher,
                         allow_public_addresses=allow_public, firewall=firewall)


def _cross_section_problems(jobs, hosts, training, evaluation, launcher) -> list[Problem]:
    return [*crosschecks.unknown_host_problems(hosts, jobs), *crosschecks.duplicate_gpu_problems(hosts),
            *crosschecks.evaluator_placement_problems(jobs, training),
            *crosschecks.best_metric_problems(training, evaluation),
            *crosschecks.directory_problems(training, launcher.logs_dir, PROJECT_ROOT)]


def _parse_or_collect(parse, raw: dict, problems: list[Problem]):
    try:
        return parse(raw)
    except UserError as error:
        problems.extend(error.problems)
        return None


def _section(raw: dict, key: str, problems: list[Problem]) -> dict:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        problems.append(Problem(key, value, "must be a JSON object", f'use "{key}": {{...}} or leave it out'))
        return {}
    return value


def _parse_cluster(cluster: Any, allow_public: bool, strategy: str,
                   problems: list[Problem]) -> dict[str, tuple[Address, ...]]:
    if not isinstance(cluster, dict):
        problems.append(Problem("cluster", cluster, "must be an object of job name -> list of host:port",
                                'use e.g. "cluster": {"chief": ["localhost:2220"], ...}'))
        return {}
    jobs: dict[str, tuple[Address, ...]] = {}
    for job, entries in cluster.items():
        if job not in JOBS:
            problems.append(Problem(f"cluster.{job}", entries, "unknown job name", f"use only {', '.join(JOBS)}"))
        elif not isinstance(entries, list):
            problems.append(Problem(f"cluster.{job}", entries, "must be a list of host:port strings",
                                    f'use e.g. "{job}": ["localhost:2222"]'))
        else:
            parsed = [_parse_address(f"cluster.{job}[{i}]", e, allow_public, problems) for i, e in enumerate(entries)]
            jobs[job] = tuple(a for a in parsed if a is not None)
    _check_counts(cluster, strategy, problems)
    _check_duplicates(jobs, problems)
    return jobs


def _parse_address(field: str, entry: Any, allow_public: bool, problems: list[Problem]) -> Address | None:
    match = ADDRESS.match(entry) if isinstance(entry, str) else None
    if not match:
        problems.append(Problem(field, entry, "is not host:port", 'use e.g. "localhost:2222" or "10.0.0.5:2222" '
                                '(an IPv6 address goes in brackets: "[fd00::5]:2222")'))
        return None
    host, port_text = match["host"], match["port"]
    if not (port_text.isdigit() and 1 <= int(port_text) <= 65535):
        problems.append(Problem(field, entry, "port must be an integer in 1-65535", "pick a free port, e.g. 2222"))
        return None
    bare = host.strip("[]")
    if not (HOSTNAME.match(bare) or _ip(bare)):
        problems.append(Problem(field, entry, "host has characters that are not allowed",
                                "use a host name of letters, digits, '-' and '.', or an IP address"))
        return None
    if _ip(bare) and not allow_public and _ip(bare).is_global:
        problems.append(Problem(field, entry, "is a public address; TensorFlow servers listen on every interface "
                                "and have no authentication", 'use private addresses, or set '
                                '"security": {"allow_public_addresses": true} if you mean it'))
    return Address(bare, int(port_text))


REQUIRED_JOBS = {PARAMETER_SERVER: ("chief", "worker", "ps"), MULTI_WORKER_MIRRORED: ("worker",),
                 "mirrored": ("chief",), "one_device": ("chief",)}


def _check_counts(cluster: dict, strategy: str, problems: list[Problem]) -> None:
    def count(job):  # a job that is not a list was reported already; do not report it twice
        entries = cluster.get(job, [])
        return len(entries) if isinstance(entries, list) else None

    needed = REQUIRED_JOBS[strategy]
    if "chief" in needed and count("chief") not in (1, None):
        problems.append(Problem("cluster.chief", cluster.get("chief"), "needs exactly one chief (the coordinator)",
                                'list one address, e.g. "chief": ["localhost:2220"]'))
    elif (count("chief") or 0) > 1:
        problems.append(Problem("cluster.chief", cluster.get("chief"), f"allows at most one chief ({strategy} "
                                "does not use it)", "keep one address or none"))
    for job in ("worker", "ps"):
        if job in needed and count(job) == 0:
            problems.append(Problem(f"cluster.{job}", cluster.get(job), f"needs at least one {job}",
                                    f'list one or more, e.g. "{job}": ["localhost:2222"]'))
    if (count("evaluator") or 0) > 1:
        problems.append(Problem("cluster.evaluator", cluster.get("evaluator"), "allows at most one evaluator",
                                "keep one address"))


def _check_duplicates(jobs: dict[str, tuple[Address, ...]], problems: list[Problem]) -> None:
    seen: dict[tuple[str, int], str] = {}
    for job, addresses in jobs.items():
        for index, address in enumerate(addresses):
            key = address.place
            if key in seen:
                problems.append(Problem(f"cluster.{job}[{index}]", str(address), f"is also used by {seen[key]}",
                                        "give every task its own host:port"))
            seen.setdefault(key, f"cluster.{job}[{index}]")


def _parse_hosts(hosts: dict, problems: list[Problem]) -> dict[str, HostSettings]:
    parsed = {}
    for name, raw in hosts.items():
        field = f"hosts.{name}"
        if not (HOSTNAME.match(name) or _ip(name)):
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
                             "use more than one epoch's duration, e.g. 900"),
    "poll_s": seconds_check("1"),
}


def _check_gpus_suffice(jobs, hosts: dict[str, HostSettings], problems: list[Problem]) -> None:
    """One worker process per GPU: a host that lists GPUs needs one for each of its workers."""
    for name, settings in hosts.items():
        workers = sum(1 for a in jobs.get("worker", ()) if a.host == name)
        if settings.gpus and workers > len(settings.gpus):
            problems.append(Problem(f"hosts.{name}.gpus", list(settings.gpus),
                                    f"has fewer GPUs than the {workers} workers on {name}",
                                    "list one GPU per worker, or run fewer workers on that host"))


def _ip(text: str):
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _ip_is(text: str, attribute: str) -> bool:
    ip = _ip(text)
    return bool(ip and getattr(ip, attribute))
