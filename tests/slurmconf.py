"""The text a test Slurm cluster needs: node names, slurm.conf, and its marked block of /etc/hosts."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Iterable

CPUS_PER_NODE = 4  # more than these 2-core machines have: accepted thanks to SlurmdParameters=config_overrides
CONTROLLER_NAME = "ctl"  # slurmctld runs in a UTS namespace of its own with this hostname
PARTITION = "test"
HOSTS_BLOCK_PREFIX = "pscluster-slurm"  # every block begins "# BEGIN pscluster-slurm-<pid>-<n>"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlurmLayout:
    """Where one test cluster's daemons listen and keep their files; everything lives under `state_dir`."""

    state_dir: Path
    controller_address: str
    controller_port: int
    slurmd_port: int
    node_names: tuple[str, ...]
    node_addresses: tuple[str, ...]

    def __post_init__(self):
        if len(self.node_names) != len(self.node_addresses):
            raise ValueError(f"`node_names` ({self.node_names}) and `node_addresses` ({self.node_addresses}) "
                             "must have the same length")

    @property
    def conf_file(self) -> Path:
        return self.state_dir / "slurm.conf"

    @property
    def munge_dir(self) -> Path:
        return self.state_dir / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket"

    @property
    def controller_dir(self) -> Path:
        return self.state_dir / "controller"

    @property
    def nodes_dir(self) -> Path:
        return self.state_dir / "nodes"

    @property
    def jobs_dir(self) -> Path:
        return self.state_dir / "jobs"

    def node_dir(self, node_name: str) -> Path:
        """Node `node_name`'s spool directory; slurm.conf names it `nodes/%n`, so it must exist beforehand."""
        return self.nodes_dir / node_name


def node_names(count: int, *, first_number: int = 1, digits: int = 2) -> tuple[str, ...]:
    """`count` names n01, n02, ...; `digits=1` with `first_number=9` gives n9, n10 (text order != numeric order)."""
    if count < 1 or first_number < 0 or digits < 1:
        raise ValueError(f"`count` ({count}) and `digits` ({digits}) must be positive, `first_number` "
                         f"({first_number}) not negative")
    return tuple(f"n{number:0{digits}d}" for number in range(first_number, first_number + count))


def slurm_conf(layout: SlurmLayout) -> str:
    """slurm.conf for root-run daemons, no cgroups, no accounting, one partition holding every node."""
    state = layout.state_dir
    settings = {
        "ClusterName": "pscluster",
        "SlurmctldHost": f"{CONTROLLER_NAME}({layout.controller_address})",
        "SlurmctldPort": layout.controller_port,
        "SlurmdPort": layout.slurmd_port,
        "SlurmUser": "root",
        "SlurmdUser": "root",
        "AuthType": "auth/munge",
        "CredType": "cred/munge",
        "AuthInfo": f"socket={layout.munge_socket}",  # our own munged, never the system's
        "StateSaveLocation": layout.controller_dir,
        "SlurmctldPidFile": layout.controller_dir / "slurmctld.pid",
        "SlurmctldLogFile": layout.controller_dir / "slurmctld.log",
        "SlurmdSpoolDir": layout.nodes_dir / "%n",
        "SlurmdPidFile": layout.nodes_dir / "%n" / "slurmd.pid",
        "SlurmdLogFile": layout.nodes_dir / "%n" / "slurmd.log",
        "SlurmdParameters": "config_overrides",
        "ProctrackType": "proctrack/linuxproc",
        "TaskPlugin": "task/none",
        "MpiDefault": "none",
        "MailProg": "/bin/true",
        "JobAcctGatherType": "jobacct_gather/none",
        "AccountingStorageType": "accounting_storage/none",
        "JobCompType": "jobcomp/none",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_CPU",
        "SchedulerType": "sched/builtin",
        "SchedulerParameters": "batch_sched_delay=0",
        "ReturnToService": 2,
        "SlurmctldTimeout": 30,
        "SlurmdTimeout": 30,
    }
    lines = [f"{key}={value}" for key, value in settings.items()]
    lines += [f"NodeName={name} NodeAddr={address} CPUs={CPUS_PER_NODE} State=UNKNOWN"
              for name, address in zip(layout.node_names, layout.node_addresses, strict=True)]
    lines.append(f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return f"# written for the test run in {state}\n" + "\n".join(lines) + "\n"


def with_hosts_block(hosts_text: str, marker: str, entries: dict[str, str]) -> str:
    """`hosts_text` (an /etc/hosts) with a block marked `marker` that maps each name to its address appended."""
    block = [f"# BEGIN {marker}", *(f"{address} {name}" for name, address in entries.items()), f"# END {marker}"]
    separator = "" if not hosts_text or hosts_text.endswith("\n") else "\n"
    return hosts_text + separator + "\n".join(block) + "\n"


def without_hosts_block(hosts_text: str, marker: str) -> str:
    """`hosts_text` without the block marked `marker` (unchanged if there is none)."""
    pattern = rf"^# BEGIN {re.escape(marker)}\n.*?^# END {re.escape(marker)}\n"
    return re.sub(pattern, "", hosts_text, flags=re.MULTILINE | re.DOTALL)


def hosts_block_markers(hosts_text: str) -> list[str]:
    """Markers of every test-cluster block in `hosts_text`."""
    return list(_hosts_blocks(hosts_text))


def blocks_naming(hosts_text: str, names: Iterable[str]) -> list[str]:
    """Markers of the test-cluster blocks in `hosts_text` that map any of `names`."""
    wanted = set(names)
    return [marker for marker, lines in _hosts_blocks(hosts_text).items()
            if wanted & {name for line in lines for name in line.split()[1:]}]


def marker_pid(marker: str) -> int:
    """The pid of the test run that wrote the block marked `marker`."""
    return int(marker.split("-")[-2])


def _hosts_blocks(hosts_text: str) -> dict[str, list[str]]:
    """Each test-cluster block's marker and its address lines."""
    pattern = rf"^# BEGIN ({re.escape(HOSTS_BLOCK_PREFIX)}-\d+-\d+)\n(.*?)^# END \1\n"
    blocks = re.findall(pattern, hosts_text, flags=re.MULTILINE | re.DOTALL)
    return {marker: body.splitlines() for marker, body in blocks}


def without_stale_hosts_blocks(hosts_text: str) -> str:
    """`hosts_text` without the blocks of test runs whose process is gone (a run killed before its teardown)."""
    for marker in hosts_block_markers(hosts_text):
        pid = marker_pid(marker)
        if not Path(f"/proc/{pid}").exists() and pid != os.getpid():
            hosts_text = without_hosts_block(hosts_text, marker)
    return hosts_text
