"""Pure builders of the ssh and rsync command lines the launcher runs, quoted from validated fields only.

What a sync may replace: the toolkit's own code folders and top-level files (`--delete` acts only inside those),
and the user's model package (copied, never pruned). Everything else in a host's workdir (outputs, logs, data,
a user's files, whatever their names) is outside the transfer, and rsync never deletes what it does not transfer.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Sequence

from cluster.config import HostSettings, LauncherSettings
from common.layers import LAYERS

CODE_FOLDERS = LAYERS
CODE_FILES = ("pyproject.toml", "run.sh", "kill.sh", "README.md")
CONTROL_PATH = "~/.ssh/pscluster-%C"


def ssh_options(settings: HostSettings, launcher: LauncherSettings) -> list[str]:
    """Options for every ssh call: no prompts, a connect timeout, the host-key policy, one shared connection."""
    options = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={launcher.ssh_connect_timeout_s}",
               "-o", f"StrictHostKeyChecking={'yes' if launcher.ssh_host_keys == 'strict' else 'accept-new'}",
               "-o", "ControlMaster=auto", "-o", f"ControlPath={CONTROL_PATH}", "-o", "ControlPersist=60",
               "-o", "ServerAliveInterval=3", "-o", "ServerAliveCountMax=2", "-p", str(settings.ssh_port)]
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


def login_hint(host: str, settings: HostSettings, launcher: LauncherSettings) -> str:
    """The ssh command a person can try by hand: the launcher's port, key and known_hosts file, no prompts."""
    options = ["-p", str(settings.ssh_port), "-o", "BatchMode=yes"]
    if launcher.ssh_identity:
        options += ["-i", launcher.ssh_identity]
    if launcher.ssh_known_hosts:
        options += ["-o", f"UserKnownHostsFile={launcher.ssh_known_hosts}"]
    if launcher.ssh_host_keys == "strict":
        options += ["-o", "StrictHostKeyChecking=yes"]
    return shlex.join(["ssh", *options, target(host, settings), "true"])


def known_hosts_hint(host: str, settings: HostSettings, launcher: LauncherSettings) -> str:
    """How to record a host's key where the launcher looks for it (ssh_host_keys: strict refuses unknown hosts)."""
    known_hosts = launcher.ssh_known_hosts or "~/.ssh/known_hosts"
    return (f"{host}'s host key is not in {known_hosts} (launcher.ssh_host_keys = strict): check its fingerprint, "
            f"then `ssh-keyscan -p {settings.ssh_port} {host} >> {known_hosts}`, or use accept-new")


def in_workdir(workdir: str, argv: Sequence[str]) -> str:
    """The remote shell string that runs `argv` from the project's directory on that host."""
    return f"cd {shlex.quote(workdir)} && {shlex.join(argv)}"


def user_code(source_dir: Path, *specs: str) -> list[str]:
    """The user's top-level modules or packages that `package.module:function` specs (a model, a dataset function)
    name, those in the project."""
    found = []
    for top in dict.fromkeys(spec.split(":")[0].split(".")[0] for spec in specs if ":" in spec):
        if (source_dir / top).is_dir():
            found.append(f"/{top}/")
        elif (source_dir / f"{top}.py").is_file():
            found.append(f"/{top}.py")
    return found


def sync_filters(user_paths: Sequence[str]) -> list[str]:
    """rsync filter rules: the toolkit's code (pruned to match), the user's model code (only added), nothing else."""
    rules = ["--filter=-p __pycache__/", "--filter=-p *.pyc"]  # never sent; never keep a folder from going
    rules += [f"--filter=P {path}**" if path.endswith("/") else f"--filter=P {path}" for path in user_paths]
    for path in (*(f"/{name}/" for name in CODE_FOLDERS), *user_paths):
        rules += [f"--filter=+ {path}", f"--filter=+ {path}**"] if path.endswith("/") else [f"--filter=+ {path}"]
    rules += [f"--filter=+ /{name}" for name in CODE_FILES]
    return [*rules, "--filter=- *"]


def rsync_push(source_dir: str, host: str, settings: HostSettings, launcher: LauncherSettings,
               workdir: str, user_paths: Sequence[str] = ()) -> list[str]:
    """Copies the project's code to the host's workdir; nothing outside the code is touched there (see above)."""
    return ["rsync", "-a", "--delete", *sync_filters(user_paths),
            "-e", shlex.join(["ssh", *ssh_options(settings, launcher)]),
            f"{source_dir.rstrip('/')}/", f"{target(host, settings)}:{workdir.rstrip('/')}/"]


def rsync_file(local_path: str, host: str, settings: HostSettings, launcher: LauncherSettings,
               remote_path: str) -> list[str]:
    """Copies one file to a path on the host."""
    return ["rsync", "-a", "-e", shlex.join(["ssh", *ssh_options(settings, launcher)]), local_path,
            f"{target(host, settings)}:{remote_path}"]


def rsync_pull(host: str, settings: HostSettings, launcher: LauncherSettings, remote_dir: str,
               local_dir: str, patterns: Sequence[str] = ("*.log", "*.exit")) -> list[str]:
    """Brings a remote directory's files matching `patterns` back (by default the task logs), kept after the run.
    A pattern ending in `/` takes a folder with everything in it."""
    rules = [r for p in patterns for r in ([f"--include={p}", f"--include={p}**"] if p.endswith("/")
                                          else [f"--include={p}"])]
    return ["rsync", "-a", *rules, "--exclude=*", "-e", shlex.join(["ssh", *ssh_options(settings, launcher)]),
            f"{target(host, settings)}:{remote_dir.rstrip('/')}/", f"{local_dir.rstrip('/')}/"]
