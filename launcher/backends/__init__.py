"""Where tasks run: the registry of backends, keyed by the kind of place; each module here implements base.Backend."""

from __future__ import annotations

from cluster.config import ClusterConfig
from launcher.backends.base import Backend


def hosts_backends(config: ClusterConfig) -> dict[str, Backend]:
    """One backend per host of the cluster: LocalHost for this machine's names and addresses, SshHost otherwise."""
    from launcher.backends.local import LocalHost, is_this_machine
    from launcher.backends.ssh import SshHost

    names = sorted({t.address.host for t in config.tasks()})
    return {name: LocalHost(config, name) if is_this_machine(name) else SshHost(config, name) for name in names}


def slurm_backends(config: ClusterConfig) -> dict[str, Backend]:
    """One backend per node of the Slurm allocation that runs a task; each task is a job step."""
    from launcher.backends.slurm import slurm_backends as per_node

    return per_node(config)


def kubernetes_backends(config: ClusterConfig) -> dict[str, Backend]:
    """None here: every task is a pod that the JobSet's controllers start and heal (launcher/backends/kubernetes)."""
    from common.errors import Problem, UserError

    raise UserError(Problem("launcher.backend", "kubernetes", "runs every task as a pod of a JobSet, never from this "
                            "machine", "see the pods with `python -m roles.launch jobset`, run them with `sh run.sh`"))


BACKENDS = {"hosts": hosts_backends, "slurm": slurm_backends, "kubernetes": kubernetes_backends}  # launcher.backend


def backends_for(config: ClusterConfig) -> dict[str, Backend]:
    """The backends that run this cluster's tasks, by place name."""
    return BACKENDS[config.launcher.backend](config)
