"""A slower link between two loopback tasks: relays in front of both that pass bytes at a set rate each way.

The calibration (launcher/calibration_run.py) times a lone worker's step on the link the plan is for, which
loopback is not: each task listens on a port of its own and the chief's cluster file names a relay's port for
it instead (TensorFlow's tasks use the chief's cluster spec to reach each other). Every connection to a task
then passes through its relay, whose bytes leave at `bytes_per_s` per direction of the link, like a token
bucket with BURST_S of burst (the benches' `tc tbf` links). The relays are threads of the calling process;
`ThrottledLink` is a context manager that stops them and closes every socket.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time

CHUNK_BYTES = 64 * 1024
BURST_S = 0.005  # the benches' tbf buckets hold 5 ms of traffic
ACCEPT_POLL_S = 0.2


class Pacer:
    """One direction of the link: chunks leave one after another at `bytes_per_s`, after a burst of BURST_S."""

    def __init__(self, bytes_per_s: float):
        self.bytes_per_s = bytes_per_s
        self.free_at = 0.0  # when the link has sent every chunk given so far
        self.lock = threading.Lock()

    def wait_to_send(self, nbytes: int) -> None:
        """Sleeps until `nbytes` more have had their time on the link."""
        with self.lock:
            now = time.monotonic()
            self.free_at = max(self.free_at, now - BURST_S) + nbytes / self.bytes_per_s
            delay = self.free_at - now
        if delay > 0:
            time.sleep(delay)


class _Joined:
    """A client's connection and its own to the target: each way pumped by a thread, both closed after the last."""

    def __init__(self, client: socket.socket, target: socket.socket):
        self.ends, self.running, self.lock = (client, target), 2, threading.Lock()

    def pump(self, source: socket.socket, sink: socket.socket, pacer: Pacer) -> None:
        """Copies `source` to `sink` at the pacer's rate until `source` closes its side (then so does `sink`'s)."""
        buffer = memoryview(bytearray(CHUNK_BYTES))
        try:
            while nbytes := source.recv_into(buffer):
                pacer.wait_to_send(nbytes)
                sink.sendall(buffer[:nbytes])
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            self.close()  # a reset, or the link stopping: the other way ends with it
        with self.lock:
            self.running -= 1
            last = self.running == 0
        if last:
            self.close()

    def close(self) -> None:
        """Ends both ways at once: a shutdown wakes a pump blocked in recv, which a close alone would not."""
        for end in self.ends:
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # closed already, or never connected
            end.close()


@dataclasses.dataclass
class _Relay:
    """Joins each connection its listener accepts to `target_port`: `inbound` paces what clients send to the
    target, `outbound` what the target sends back."""

    listener: socket.socket
    target_port: int
    inbound: Pacer
    outbound: Pacer


class ThrottledLink:
    """Relays at `bytes_per_s` each way between a ps and a worker of this machine, each given as (relay port,
    task port); each direction's rate is shared by every connection through either relay (the chief's too)."""

    def __init__(self, bytes_per_s: float, *, ps: tuple[int, int], worker: tuple[int, int]):
        self.bytes_per_s, self.ps, self.worker = bytes_per_s, ps, worker
        self.stopping = threading.Event()
        self.joined: list[_Joined] = []
        self.threads: list[threading.Thread] = []

    def __enter__(self) -> "ThrottledLink":
        toward_ps, toward_worker = Pacer(self.bytes_per_s), Pacer(self.bytes_per_s)
        relays = [_Relay(_listening(self.ps[0]), self.ps[1], inbound=toward_ps, outbound=toward_worker),
                  _Relay(_listening(self.worker[0]), self.worker[1], inbound=toward_worker, outbound=toward_ps)]
        self.threads = [threading.Thread(target=self._accept, args=(relay,), daemon=True) for relay in relays]
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *error) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join()
        for joined in self.joined:
            joined.close()

    def _accept(self, relay: _Relay) -> None:
        with relay.listener:
            while not self.stopping.is_set():
                try:
                    client, _ = relay.listener.accept()
                except TimeoutError:
                    continue
                try:
                    target = socket.create_connection(("127.0.0.1", relay.target_port))
                except OSError:
                    client.close()  # the task is not (or no longer) up: its client sees the refusal as a drop
                    continue
                for end in (client, target):
                    end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                joined = _Joined(client, target)
                self.joined.append(joined)
                for source, sink, pacer in ((client, target, relay.inbound), (target, client, relay.outbound)):
                    threading.Thread(target=joined.pump, args=(source, sink, pacer), daemon=True).start()


def _listening(port: int) -> socket.socket:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    listener.settimeout(ACCEPT_POLL_S)
    return listener
