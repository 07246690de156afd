"""Pure builders of the ssh and rsync command lines the launcher runs, quoted from validated fields only."""

from __future__ import annotations

import shlex
from typing import Sequence

from cluster.config import HostSettings, LauncherSettings

SYNC_EXCLUDES = (".venv", ".git", "logs", "output", "__pycache__", ".pytest_cache", ".pscluster")
CONTROL_PATH = "~/.ssh/pscluster-%C"


def ssh_options(settings: HostSettings, launcher: LauncherSettings) -> list[str]:
    """Options for every ssh call: no prompts, a connect timeout, the host-key policy, one shared connection."""
    options = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={launcher.ssh_connect_timeout_s}",
               "-o", f"StrictHostKeyChecking={'yes' if launcher.ssh_host_keys == 'strict' else 'accept-new'}",
               "-o", "ControlMaster=auto", "-o", f"ControlPath={CONTROL_PATH}", "-o", "ControlPersist=60",
               "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=2", "-p", str(settings.ssh_port)]
    if launcher.ssh_identity:
        options += ["-i", launcher.ssh_identity, "-o", "IdentitiesOnly=yes"]
    if launcher.ssh_known_hosts:
        options += ["-o", f"UserKnownHostsFile={launcher.ssh_known_hosts}"]
    return options


def target(host: str, settings: HostSettings) -> str:
    return f"{settings.ssh_user}@{host}" if settings.ssh_user else host


def ssh_command(host: str, settings: HostSettings, launcher: LauncherSettings, remote: str) -> list[str]:
    """`ssh [options] [user@]host -- remote`; `remote` is one shell string for the remote side."""
    return ["ssh", *ssh_options(settings, launcher), target(host, settings), "--", remote]


def in_workdir(workdir: str, argv: Sequence[str]) -> str:
    """The remote shell string that runs `argv` from the project's directory on that host."""
    return f"cd {shlex.quote(workdir)} && {shlex.join(argv)}"


def rsync_push(source_dir: str, host: str, settings: HostSettings, launcher: LauncherSettings,
               workdir: str) -> list[str]:
    """Copies the project to the host's workdir, leaving out environments, logs and outputs."""
    excludes = [f"--exclude=/{name}" for name in SYNC_EXCLUDES]
    return ["rsync", "-a", "--delete", *excludes, "-e", shlex.join(["ssh", *ssh_options(settings, launcher)]),
            f"{source_dir.rstrip('/')}/", f"{target(host, settings)}:{workdir.rstrip('/')}/"]


def rsync_file(local_path: str, host: str, settings: HostSettings, launcher: LauncherSettings,
               remote_path: str) -> list[str]:
    """Copies one file to a path on the host."""
    return ["rsync", "-a", "-e", shlex.join(["ssh", *ssh_options(settings, launcher)]), local_path,
            f"{target(host, settings)}:{remote_path}"]


def rsync_pull(host: str, settings: HostSettings, launcher: LauncherSettings, remote_dir: str,
               local_dir: str) -> list[str]:
    """Brings a remote directory's log files back (only *.log and *.exit), keeping them after the run."""
    return ["rsync", "-a", "--include=*.log", "--include=*.exit", "--exclude=*",
            "-e", shlex.join(["ssh", *ssh_options(settings, launcher)]),
            f"{target(host, settings)}:{remote_dir.rstrip('/')}/", f"{local_dir.rstrip('/')}/"]
