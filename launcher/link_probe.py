"""Link bandwidth and round-trip time between a ps host and a worker host, from one short bounded transfer.

A tiny sender listens on the ps host (at the ps's own port when it is free, as the ps will); a tiny receiver
started on the worker host connects as a worker would, first bounces PINGS one-byte messages off the sender (the
median is the round-trip time), then receives zeros. Both run through the launcher's ssh (or here, for this
machine) with the system's python3, stop after `seconds` or `max_bytes`, whichever comes first, and the receiver
reports the rate after the first fifth of the time (TCP's slow start).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import NamedTuple

from cluster.config import ClusterConfig
from launcher.backends.ssh import commands as ssh_commands
from launcher.backends.local import is_this_machine

SECONDS = 1.0
MAX_BYTES = 512 * 2 ** 20
PINGS = 20
SENDER = r"""
import json, socket, sys, time
host, port, seconds, max_bytes, pings = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), *map(int, sys.argv[4:6])
server = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    server.bind((host, port))
except OSError:
    server.bind((host, 0))
server.listen(1)
server.settimeout(seconds + 30)
print(json.dumps({"port": server.getsockname()[1]}), flush=True)
connection, _ = server.accept()
connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for _ in range(pings):
    connection.sendall(connection.recv(1))
block, sent, deadline = bytes(1 << 20), 0, time.monotonic() + seconds
while sent < max_bytes and time.monotonic() < deadline:
    sent += connection.send(block)
connection.close()
"""
RECEIVER = r"""
import json, socket, statistics, sys, time
host, port, seconds, pings = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
connection = socket.create_connection((host, port), timeout=seconds + 30)
connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
trips = []
for _ in range(pings):
    sent_at = time.perf_counter()
    connection.sendall(b"p")
    connection.recv(1)
    trips.append(time.perf_counter() - sent_at)
marks, received, started = [], 0, time.monotonic()
while chunk := connection.recv(1 << 20):
    received += len(chunk)
    marks.append((time.monotonic() - started, received))
end = marks[-1] if marks else (0.0, 0)
skip = next((m for m in marks if m[0] >= end[0] / 5), (0.0, 0))
rate = (end[1] - skip[1]) / (end[0] - skip[0]) if end[0] > skip[0] else 0.0
print(json.dumps({"bytes": received, "seconds": end[0], "bytes_per_s": rate, "rtt_s": statistics.median(trips)}),
      flush=True)
"""


class Measured(NamedTuple):
    """What one probe found: bytes per second from the ps host to the worker host, and the round-trip time."""

    bytes_per_s: float
    rtt_s: float


class ProbeFailed(Exception):
    """The transfer could not run; the message names the hosts and what went wrong."""


def command_on(config: ClusterConfig, host: str, *arguments) -> list[str]:
    """The system's python3 with ARGUMENTS, here or over the launcher's ssh to `host`."""
    argv = ["python3", *map(str, arguments)]
    if is_this_machine(host):
        return argv
    Path("~/.ssh").expanduser().mkdir(mode=0o700, exist_ok=True)  # for ssh's shared connection's socket
    return ssh_commands.ssh_command(host, config.host(host), config.launcher, shlex.join(argv))


def measure(config: ClusterConfig, worker_host: str, ps_host: str, port: int, *, seconds: float = SECONDS,
            max_bytes: int = MAX_BYTES, pings: int = PINGS) -> Measured:
    """Bytes per second from `ps_host` to `worker_host` over one bounded transfer, and the median round trip."""
    timeout_s = 2 * config.launcher.ssh_connect_timeout_s + seconds + 30
    sender = subprocess.Popen(command_on(config, ps_host, "-c", SENDER, ps_host, port, seconds, max_bytes,
                                         pings),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = sender.stdout.readline()  # the listening port; the sender exits by itself after `seconds`
        if not first:
            raise ProbeFailed(f"link {ps_host} -> {worker_host}: the sender on {ps_host} did not start: "
                              f"{sender.communicate(timeout=timeout_s)[1].strip()[-300:]}")
        listening = json.loads(first)["port"]
        receiver = subprocess.run(command_on(config, worker_host, "-c", RECEIVER, ps_host, listening, seconds,
                                             pings),
                                  capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
        if receiver.returncode != 0:
            raise ProbeFailed(f"link {ps_host} -> {worker_host}: the receiver on {worker_host} failed: "
                              f"{receiver.stderr.strip()[-300:]}")
        sender.wait(timeout_s)
    except subprocess.TimeoutExpired:
        raise ProbeFailed(f"link {ps_host} -> {worker_host}: no result within {timeout_s:.0f} s") from None
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait()
    found = json.loads(receiver.stdout.strip().splitlines()[-1])
    if found["bytes_per_s"] <= 0:
        raise ProbeFailed(f"link {ps_host} -> {worker_host}: nothing arrived")
    return Measured(found["bytes_per_s"], found["rtt_s"])

