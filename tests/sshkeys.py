"""Throwaway ssh keys for test hosts: a client identity, one host key per host, and a known_hosts binding them."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterable


def generate_key(path: Path, comment: str) -> Path:
    """Writes a new ed25519 key pair without passphrase to `path` and `path`.pub; returns `path`."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    return path


def public_key(path: Path) -> str:
    """The `type base64` part of the public key of private key `path`, without its comment."""
    key_type, key, *_ = path.with_name(path.name + ".pub").read_text().split()
    return f"{key_type} {key}"


def write_known_hosts(path: Path, host_keys: Iterable[tuple[str, Path]]) -> Path:
    """A known_hosts file that accepts, for each (address, private host key), only that key at that address."""
    path.write_text("".join(f"{address} {public_key(key)}\n" for address, key in host_keys))
    return path


def write_authorized_keys(path: Path, identity: Path) -> Path:
    """An authorized_keys file that admits only `identity`."""
    path.write_text(public_key(identity) + "\n")
    return path
