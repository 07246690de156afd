"""An nftables allowlist per host: task ports accept only loopback, cluster members and the launcher (no auth in TF)."""

from __future__ import annotations

import hashlib
import ipaddress
import socket
import subprocess

from cluster.config import ClusterConfig, Task


class FirewallError(Exception):
    """nft refused or is missing; the message says which."""


def table_name(config: ClusterConfig) -> str:
    """One table per cluster, named from its lead's address (no two running clusters share one): two clusters on a
    host never touch each other's table, and a reload that changes the other tasks replaces it in place."""
    digest = hashlib.sha256(str(config.lead.address).encode()).hexdigest()[:10]
    return f"pscluster_{digest}"


def member_addresses(config: ClusterConfig, extra: list[str] = ()) -> tuple[list[str], list[str]]:
    """IPv4 and IPv6 addresses of every cluster host (names resolved here) plus `extra` (e.g. the launcher)."""
    v4, v6 = set(), set()
    for name in {t.address.host for t in config.tasks()} | set(extra):
        for info in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP):
            ip = ipaddress.ip_address(info[4][0])
            (v4 if ip.version == 4 else v6).add(str(ip))
    return sorted(v4), sorted(v6)


def ruleset(table: str, ports: list[int], allowed_v4: list[str], allowed_v6: list[str]) -> str:
    """The nft script: a table of its own whose input hook drops task-port traffic from anyone else."""
    port_set = ", ".join(str(p) for p in sorted(set(ports)))
    rules = [f'        iifname "lo" tcp dport {{ {port_set} }} accept']
    if allowed_v4:
        rules.append(f"        ip saddr {{ {', '.join(allowed_v4)} }} tcp dport {{ {port_set} }} accept")
    if allowed_v6:
        rules.append(f"        ip6 saddr {{ {', '.join(allowed_v6)} }} tcp dport {{ {port_set} }} accept")
    rules.append(f"        tcp dport {{ {port_set} }} drop")
    body = "\n".join(rules)
    return (f"table inet {table} {{\n    chain input {{\n        type filter hook input priority 0; policy accept;\n"
            f"{body}\n    }}\n}}\n")


def _nft(arguments: list[str], script: str | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["nft", *arguments], input=script, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise FirewallError("nft is not installed (Debian package nftables)") from None


def apply(config: ClusterConfig, tasks: list[Task], extra_allowed: list[str] = ()) -> str:
    """Replaces this cluster's table on this host with an allowlist for the given tasks' ports, in one nft
    transaction (create if missing, delete, define), so the ports are never unguarded in between."""
    table = table_name(config)
    script = ruleset(table, [t.address.port for t in tasks], *member_addresses(config, list(extra_allowed)))
    result = _nft(["-f", "-"], f"table inet {table}\ndelete table inet {table}\n{script}")
    if result.returncode != 0:
        raise FirewallError(f"nft refused the allowlist (root is needed): {result.stderr.strip()[:300]}")
    return table


def remove(config: ClusterConfig) -> bool:
    """Deletes this cluster's table if it exists; True when one was removed (False also without nft)."""
    try:
        return _nft(["delete", "table", "inet", table_name(config)]).returncode == 0
    except FirewallError:
        return False
