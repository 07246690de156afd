"""Bytes carried by the TCP connections of given local ports, per connection, from `ss -tin` (other traffic ignored).

The loopback interface counter counts every process on the machine; the kernel's per-socket counters
(`bytes_acked`: sent and acknowledged, `bytes_received`) count only the connections a server port accepted.
Take a snapshot before and after what is measured and subtract: `moved(before, after)`.
"""

from __future__ import annotations

import re
import subprocess

COUNTER = re.compile(r"\b(bytes_acked|bytes_received):(\d+)")


def _filter(ports) -> str:
    return "( " + " or ".join(f"sport = :{port}" for port in ports) + " )"


def snapshot(ports) -> dict[tuple[str, str], tuple[int, int]]:
    """(local address, peer address) -> (bytes sent by the server side, bytes it received), for each connection."""
    output = subprocess.run(["ss", "-tinH", "state", "established", _filter(ports)], capture_output=True,
                            text=True, check=True).stdout
    connections, key = {}, None
    for line in output.splitlines():
        if not line.startswith((" ", "\t")):
            fields = line.split()
            key = (fields[-2], fields[-1]) if len(fields) >= 2 else None
            continue
        counters = dict(COUNTER.findall(line))
        if key is not None:
            connections[key] = (int(counters.get("bytes_acked", 0)), int(counters.get("bytes_received", 0)))
    return connections


def moved(before: dict, after: dict) -> dict[str, int]:
    """Bytes sent and received by the server side between two snapshots (a new connection started at zero)."""
    sent = sum(a[0] - before.get(key, (0, 0))[0] for key, a in after.items())
    received = sum(a[1] - before.get(key, (0, 0))[1] for key, a in after.items())
    return {"sent": sent, "received": received, "total": sent + received, "connections": len(after)}
