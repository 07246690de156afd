"""Which machine a host is, how many cores its tasks may use and how much memory is free, asked on the host
itself (through ssh, or here).

Hosts whose kernels have the same boot id are one machine: network namespaces and containers on one box share
its cores, which `plan` must count once. The cores are those the host's processes may run on (affinity).
"""

from __future__ import annotations

import subprocess

from cluster.capacity import Machine
from cluster.config import ClusterConfig
from launcher.link_probe import ProbeFailed, command_on

ASK = ("import os; print(open('/proc/sys/kernel/random/boot_id').read().strip(), "
       "len(os.sched_getaffinity(0)), next(int(l.split()[1]) for l in open('/proc/meminfo') "
       "if l.startswith('MemAvailable:')))")


def machine_of(config: ClusterConfig, host: str) -> Machine:
    """The host's machine (its kernel's boot id), its usable cores and its available memory."""
    timeout_s = 2 * config.launcher.ssh_connect_timeout_s + 30
    try:
        answer = subprocess.run(command_on(config, host, "-c", ASK), capture_output=True, text=True,
                                timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ProbeFailed(f"{host}: no answer about its cores within {timeout_s:.0f} s") from None
    fields = answer.stdout.split()
    if answer.returncode != 0 or len(fields) != 3:
        raise ProbeFailed(f"{host}: could not read its cores and memory: {answer.stderr.strip()[-300:]}")
    return Machine(name=fields[0], cores=float(fields[1]), memory_bytes=float(fields[2]) * 1024)


def machines(config: ClusterConfig, hosts) -> dict[str, Machine]:
    """Every host's machine, asked once per host."""
    return {host: machine_of(config, host) for host in dict.fromkeys(hosts)}
