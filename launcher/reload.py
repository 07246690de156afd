"""`sh run.sh reload [cluster.json]`: a running job takes an edited cluster.json (workers and ps added or removed).

The command checks the new file as every command does, then hands it to the launcher that runs the cluster
through two files in its logs directory: `reload.json` (the request) and `reload.answer.json` (applied, with one
line per change, or refused with one line). Only the `worker` and `ps` lists (and `hosts` entries for new
hosts) may change live; anything else (strategy, model, training options, chief, evaluator, launcher settings)
is refused and nothing changes. The launcher then stops the chief (it writes a checkpoint), stops the servers
that left, starts the new ones, and starts the chief on the new spec; a different ps count reshards on restore.
Under Slurm, new job sizes are placed on the nodes the allocation holds (`launcher/backends/slurm/resize.py`);
with the firewall on, each host's table is replaced to guard the new ports.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

from cluster.config import ClusterConfig
from common.errors import Problem, UserError

REQUEST_NAME, ANSWER_NAME = "reload.json", "reload.answer.json"
LIVE_JOBS = ("worker", "ps")
LIVE_BACKENDS = ("hosts", "slurm")
ANSWER_TIMEOUT_S = 900.0


def refusals(old: ClusterConfig, new: ClusterConfig) -> list[Problem]:
    """One problem per setting that differs and cannot change in a running job; [] when the reload may go on."""
    if old.launcher.backend not in LIVE_BACKENDS:
        return [Problem("launcher.backend", old.launcher.backend, "a running job takes new worker and ps counts only "
                        "with the hosts and slurm backends (on Kubernetes, the JobSet's sizes are the cluster's)",
                        "stop the run (`sh kill.sh`, which checkpoints) and start it again with the new sizes")]
    problems = []
    for job in ("chief", "evaluator"):
        if old.jobs.get(job, ()) != new.jobs.get(job, ()):
            problems.append(_refused(f"cluster.{job}", [str(a) for a in new.jobs.get(job, ())],
                                     [str(a) for a in old.jobs.get(job, ())]))
    for section in ("training", "evaluation", "launcher", "slurm"):
        before, after = dataclasses.asdict(getattr(old, section)), dataclasses.asdict(getattr(new, section))
        problems += [_refused(f"{section}.{name}", after[name], before[name]) for name in after
                     if after[name] != before[name]]
    for name in ("job_sizes", "allow_public_addresses", "firewall"):
        if getattr(old, name) != getattr(new, name):
            problems.append(_refused(name, getattr(new, name), getattr(old, name)))
    problems += [_refused(f"hosts.{host}", "changed", "as it was") for host in old.hosts
                 if host in new.hosts and old.hosts[host] != new.hosts[host]]
    return problems


def _refused(field: str, value, before) -> Problem:
    return Problem(field, value, f"cannot change in a running job (it is {before!r})",
                   "only cluster.worker and cluster.ps change live; put it back, or stop the run (`sh kill.sh`, "
                   "which checkpoints) and start it again with the new file")


def request(config: ClusterConfig, *, running_pid: int) -> list[str]:
    """Hands `config` to the launcher `running_pid` and returns its answer's lines; raises UserError if refused."""
    logs = config.path(config.launcher.logs_dir)
    ident = f"{os.getpid()}-{time.time()}"
    (logs / ANSWER_NAME).unlink(missing_ok=True)
    _write_json(logs / REQUEST_NAME, {"id": ident, "cluster": str(config.source)})
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while time.monotonic() < deadline:
        answer = _read_json(logs / ANSWER_NAME)
        if answer and answer.get("id") == ident:
            if answer["refused"]:
                raise UserError([Problem(**p) for p in answer["refused"]], source=str(config.source))
            return answer["lines"]
        if not _alive(running_pid):
            raise UserError(Problem("launcher", running_pid, "ended before it answered the reload",
                                    "see `sh run.sh status` and the launcher's log"))
        time.sleep(0.5)
    raise UserError(Problem("launcher", running_pid, f"did not answer the reload within {ANSWER_TIMEOUT_S:.0f} s",
                            "see `sh run.sh status` and the launcher's log"))


def take_request(logs: Path) -> dict | None:
    """A pending request (removed as it is taken), or None."""
    path = logs / REQUEST_NAME
    found = _read_json(path)
    if found is not None:
        path.unlink(missing_ok=True)
    return found


def answer(logs: Path, ident: str, *, lines: list[str] = (), refused: list[Problem] = ()) -> None:
    _write_json(logs / ANSWER_NAME, {"id": ident, "lines": list(lines),
                                     "refused": [dataclasses.asdict(p) for p in refused]})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def _write_json(path: Path, document: dict) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(document, default=str))
    partial.replace(path)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def apply_request(supervisor, logs: Path, say) -> None:
    """Carries out a pending reload request, if any, and answers it."""
    from cluster import config as cluster_config
    from launcher.backends.slurm import resize as slurm_resize

    pending = take_request(logs)
    if pending is None:
        return
    under_slurm = supervisor.config.launcher.backend == "slurm"
    try:
        new = cluster_config.load(pending["cluster"])
        if under_slurm and new.launcher.backend == "slurm":
            new = slurm_resize.on_allocation(supervisor.config, new)
        problems = refusals(supervisor.config, new)
    except UserError as error:
        problems = error.problems
    if problems:
        slurm_resize.discard(supervisor.config)
        for problem in problems:
            say(f"reload refused: {problem.text()}")
        answer(logs, pending["id"], refused=problems)
        return
    if new.tasks() == supervisor.config.tasks():
        slurm_resize.discard(supervisor.config)
        answer(logs, pending["id"], lines=["nothing to change: the job runs these workers and ps already"])
        return
    say(f"reload: taking {pending['cluster']}")
    lines = apply(supervisor, slurm_resize.adopt(new) if under_slurm else new)
    for line in lines:
        say(f"reload: {line}")
    answer(logs, pending["id"], lines=lines)


def apply(supervisor, new: ClusterConfig) -> list[str]:
    """Takes an edited worker and ps list: the lead stops (writing a checkpoint), servers that left stop, new ones
    start, and the lead starts again on the new spec; returns one line per change."""
    from launcher.membership import Membership
    from launcher.records import DONE_STATES, TaskRecord, TaskState

    before = {t.name: t for t in supervisor.config.tasks()}
    kept = {t.name for t in new.tasks() if before.get(t.name) == t}  # same job, index and address: runs on
    lead, lines = supervisor.lead, []
    if lead.state not in DONE_STATES:
        supervisor.hosts[lead.host].stop([lead.task])
        lines.append(f"{lead.name} stopped (it writes a checkpoint on the way out)")
    for record in [r for r in supervisor.records.values() if r.task.job in LIVE_JOBS and r.name not in kept]:
        supervisor.hosts[record.host].stop([record.task])
        lines.append(f"{record.name} at {record.task.address} stopped")
    lines += _take_hosts(supervisor, new)
    supervisor.records = {t.name: supervisor.records[t.name] if t.name in kept or t.job not in LIVE_JOBS
                          else TaskRecord(t) for t in new.tasks() if t.job in supervisor.strategy.launched_jobs}
    supervisor.lead, supervisor.held_for = supervisor.records[new.lead.name], []
    supervisor.membership = Membership(supervisor)
    started = [r for r in supervisor.records.values() if r.task.job in LIVE_JOBS and r.name not in kept]
    if started:
        supervisor.start_records(started)
        lines.append(f"started {', '.join(f'{r.name} at {r.task.address}' for r in started)}")
    if supervisor.lead.state not in DONE_STATES:
        supervisor.lead.state, supervisor.lead.restart_at = TaskState.RESTARTING, 0.0
        supervisor.lead.counts_as_restart = False
        lines.append(f"{supervisor.lead.name} starts again with {len(new.jobs['worker'])} worker(s) and "
                     f"{len(new.jobs['ps'])} ps, from the checkpoint it wrote")
    return lines


def _take_hosts(supervisor, new: ClusterConfig) -> list[str]:
    """The supervisor's hosts for the new file: kept ones take it, new ones are prepared, and with the firewall on
    every host's table is replaced (a host that left loses its table)."""
    from launcher.backends import backends_for

    hosts, lines = backends_for(new), []
    for name, host in hosts.items():
        if name in supervisor.hosts:
            hosts[name] = supervisor.hosts[name]
            hosts[name].take_new_config(new)
        else:
            host.prepare(supervisor.say)
    if new.firewall:
        for name in supervisor.hosts.keys() - hosts.keys():
            if supervisor.hosts[name].firewall_off():
                lines.append(f"firewall on {name} removed")
        for name, host in hosts.items():
            rules = host.firewall_on([t for t in new.tasks() if t.address.host == name])
            lines.append(f"firewall on {name}: table {rules.table} guards ports {rules.ports}")
    for name in supervisor.hosts.keys() - hosts.keys():
        supervisor.hosts[name].close()  # a host that left keeps no agent for the looks
    supervisor.config, supervisor.hosts = new, hosts
    return lines
