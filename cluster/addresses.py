"""Addresses in the cluster section: `host:port` parsed and checked, and the tasks they name."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from typing import Any

from common.errors import Problem

LOOPBACK_NAMES = ("localhost",)
LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){LABEL}(\.{LABEL})*$")
ADDRESS = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[^:\[\]]+):(?P<port>[^:]*)$")


@dataclasses.dataclass(frozen=True, order=True)
class Address:
    """A `host:port` from the cluster section."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def is_loopback(self) -> bool:
        return self.host.lower().rstrip(".") in LOOPBACK_NAMES or ip_is(self.host, "is_loopback")

    @property
    def place(self) -> tuple[str, int]:
        """Where the port really is: loopback and unspecified (0.0.0.0, ::) names are all this machine, IP
        spellings are normalised (::ffff:10.0.0.1 is 10.0.0.1), host names compare without case."""
        ip = ip_of(self.host)
        ip = ip.ipv4_mapped or ip if isinstance(ip, ipaddress.IPv6Address) else ip
        if self.is_loopback or (ip and ip.is_unspecified) or (ip and ip.is_loopback):
            return ("this machine", self.port)
        return (str(ip) if ip else self.host.lower().rstrip("."), self.port)


@dataclasses.dataclass(frozen=True)
class Task:
    """One process of the cluster: its job, index and address."""

    job: str
    index: int
    address: Address

    @property
    def name(self) -> str:
        return f"{self.job}:{self.index}"


def parse_address(field: str, entry: Any, allow_public: bool, problems: list[Problem]) -> Address | None:
    match = ADDRESS.match(entry) if isinstance(entry, str) else None
    if not match:
        problems.append(Problem(field, entry, "is not host:port", 'use e.g. "localhost:2222" or "10.0.0.5:2222" '
                                '(an IPv6 address goes in brackets: "[fd00::5]:2222")'))
        return None
    host, port_text = match["host"], match["port"]
    if not (port_text.isdigit() and 1 <= int(port_text) <= 65535):
        problems.append(Problem(field, entry, "port must be an integer in 1-65535", "pick a free port, e.g. 2222"))
        return None
    bare = host.strip("[]")
    if not (HOSTNAME.match(bare) or ip_of(bare)):
        problems.append(Problem(field, entry, "host has characters that are not allowed",
                                "use a host name of letters, digits, '-' and '.', or an IP address"))
        return None
    if ip_of(bare) and not allow_public and ip_of(bare).is_global:
        problems.append(Problem(field, entry, "is a public address; TensorFlow servers listen on every interface "
                                "and have no authentication", 'use private addresses, or set '
                                '"security": {"allow_public_addresses": true} if you mean it'))
    return Address(bare, int(port_text))


def ip_of(text: str):
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def ip_is(text: str, attribute: str) -> bool:
    ip = ip_of(text)
    return bool(ip and getattr(ip, attribute))
