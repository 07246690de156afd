"""Which machine a host is, how many cores its tasks may use and how much memory is free: given in cluster.json
(`hosts.<name>.cores` and `memory_gib`), else asked on the host itself (through ssh, or here).

Hosts whose kernels have the same boot id are one machine: network namespaces and containers on one box share
its cores, which `plan` must count once. The cores are those the host's processes may run on (affinity). A host
whose cores and memory are both given is not asked: a machine of its own, which is how `plan` plans hosts it
cannot reach (not yet bought, or not up yet); a figure given beside an asked one replaces it.
"""

from __future__ import annotations

import subprocess

from cluster.capacity import Machine
from cluster.capacity_inputs import missing_keys
from cluster.config import ClusterConfig
from launcher.link_probe import ProbeFailed, command_on

ASK = ("import os; print(open('/proc/sys/kernel/random/boot_id').read().strip(), "
       "len(os.sched_getaffinity(0)), next(int(l.split()[1]) for l in open('/proc/meminfo') "
       "if l.startswith('MemAvailable:')))")
FIGURES = ("cores", "memory_gib")


def machine_of(config: ClusterConfig, host: str) -> Machine:
    """The host's machine (its kernel's boot id), its usable cores and its available memory."""
    settings = config.host(host)
    if settings.cores is not None and settings.memory_gib is not None:
        return Machine(name=f"host {host}", cores=float(settings.cores), memory_bytes=settings.memory_gib * 2 ** 30)
    asked = _asked(config, host)
    return Machine(name=asked.name, cores=float(settings.cores or asked.cores),
                   memory_bytes=settings.memory_gib * 2 ** 30 if settings.memory_gib else asked.memory_bytes)


def _asked(config: ClusterConfig, host: str) -> Machine:
    timeout_s = 2 * config.launcher.ssh_connect_timeout_s + 30
    unless = f"; to plan without asking it, give {missing_keys(config, [host], FIGURES)}"
    try:
        answer = subprocess.run(command_on(config, host, "-c", ASK), capture_output=True, text=True,
                                timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ProbeFailed(f"{host}: no answer about its cores and memory within {timeout_s:.0f} s{unless}") from None
    fields = answer.stdout.split()
    if answer.returncode != 0 or len(fields) != 3:
        raise ProbeFailed(f"{host}: could not read its cores and memory: {answer.stderr.strip()[-300:]}{unless}")
    return Machine(name=fields[0], cores=float(fields[1]), memory_bytes=float(fields[2]) * 1024)


def machines(config: ClusterConfig, hosts) -> dict[str, Machine]:
    """Every host's machine, given or asked once per host."""
    return {host: machine_of(config, host) for host in dict.fromkeys(hosts)}
