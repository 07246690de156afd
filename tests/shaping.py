"""Slow links for namespace hosts: `tc` token buckets on both ends of a host's veth, so its link runs at a set rate.

Egress of the bridge side limits what reaches the host, egress of the host's eth0 what leaves it; both are
removed with the host's links. Only the test's own namespaces are touched.
"""

from __future__ import annotations

import re
import subprocess

MIN_BURST_BYTES = 128 * 1024  # above veth's 64 KiB GSO packets, which a smaller bucket would drop
LATENCY = "50ms"


def tbf(device: str, mbit: float) -> list[str]:
    """`tc qdisc replace` of a token bucket at `mbit` Mbit/s on `device`, its bucket 5 ms of traffic or more."""
    burst = max(MIN_BURST_BYTES, int(mbit * 1e6 / 8 * 0.005))
    return ["tc", "qdisc", "replace", "dev", device, "root", "tbf", "rate", f"{mbit}mbit", "burst", str(burst),
            "latency", LATENCY]


def dropped(hosts, index: int) -> int:
    """Packets the token buckets of host `index` dropped so far (their queue was full), both directions."""
    total = 0
    for argv in (["tc", "-s", "qdisc", "show", "dev", hosts.claims.links[index]],
                 ["ip", "netns", "exec", hosts.namespaces[index], "tc", "-s", "qdisc", "show", "dev", "eth0"]):
        shown = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        total += sum(int(found) for found in re.findall(r"\(dropped (\d+),", shown.stdout))
    return total


def shape_host(hosts, index: int, mbit: float) -> None:
    """Limits host `index` of a netns.NamespaceHosts to `mbit` Mbit/s each way."""
    for argv in (tbf(hosts.claims.links[index], mbit),
                 ["ip", "netns", "exec", hosts.namespaces[index], *tbf("eth0", mbit)]):
        subprocess.run(argv, check=True, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
