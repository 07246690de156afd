"""Before anything starts: hosts made ready and checked, one line per problem, so a run fails fast and clearly."""

from __future__ import annotations

import data
from cluster.config import PROJECT_ROOT, ClusterConfig
from launcher import agent
from launcher.backends.base import AgentFailed, HostUnreachable


class PreflightFailed(Exception):
    """Everything found wrong before starting, one line each."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def exposure_warning(config: ClusterConfig) -> str | None:
    """What is open to the network when tasks listen on non-loopback addresses (TensorFlow has no auth)."""
    listening = tuple(job for job in config.strategy.launched_jobs if job != "evaluator")
    exposed = [t for t in config.tasks(listening) if not t.address.is_loopback]
    if not exposed:
        return None
    return ("warning: TensorFlow servers listen on every interface with no authentication and run any graph "
            f"they are sent; exposed: {', '.join(f'{t.name} port {t.address.port}' for t in exposed)}. "
            "Keep these hosts on a private network.")


def check_cluster(config: ClusterConfig, hosts: dict, say) -> None:
    """Checks the data set (when the lead trainer runs here), syncs remote hosts, then checks ports, disk, the
    lead's output and versions on every host that runs a task."""
    if not hosts[config.lead.address.host].is_remote:
        data.preflight(config.training, PROJECT_ROOT)  # a data mistake: one line per problem, exit 2
    warning = exposure_warning(config)
    if warning:
        say(warning)
    mine = agent.versions()
    problems = []
    for name, host in hosts.items():
        tasks = [t for t in config.launched_tasks() if t.address.host == name]
        if not tasks:
            continue
        try:
            host.prepare(say)
            report = host.preflight(tasks)
        except HostUnreachable as error:
            problems.append(f"{error}; check that it is up, that sshd runs there and that `ssh {name}` works "
                            "without a password (BatchMode)")
            continue
        except AgentFailed as error:
            problems.append(f"{error}; check hosts.{name}.python (it needs the project's packages: "
                            "leave it relative to bootstrap .venv there)")
            continue
        problems += report.problems
        if report.versions != mine:
            problems.append(f"{name} has {report.versions} but the launcher has {mine}; install the same "
                            "versions there (sh roles/bootstrap.sh run in its workdir)")
    if problems:
        raise PreflightFailed(problems)
