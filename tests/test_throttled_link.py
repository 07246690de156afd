"""The calibration's throttled link: relays on loopback that pass every byte, at no more than their rate each way."""

from __future__ import annotations

import socket
import threading
import time

from clusterkit import free_ports
from launcher.throttled_link import BURST_S, ThrottledLink

RATE = 4e6  # bytes/s
PAYLOAD = bytes(range(256)) * 4096  # 1 MiB


class EchoTask:
    """A stand-in task on `port`: reads what a connection sends until it closes its side, then sends it back."""

    def __init__(self, port: int):
        self.listener = socket.create_server(("127.0.0.1", port))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        connection, _ = self.listener.accept()
        with connection:
            received = b"".join(iter(lambda: connection.recv(65536), b""))
            connection.sendall(received)

    def close(self) -> None:
        self.thread.join(timeout=60)
        self.listener.close()


def round_trip(port: int) -> tuple[bytes, float, float]:
    """Sends PAYLOAD to `port` and reads it back: the bytes, the seconds until the first came back (all had to
    reach the task) and the seconds after it."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as connection:
        start = time.monotonic()
        connection.sendall(PAYLOAD)
        connection.shutdown(socket.SHUT_WR)
        first = connection.recv(65536)
        sent_s = time.monotonic() - start
        back = first + b"".join(iter(lambda: connection.recv(65536), b""))
        return back, sent_s, time.monotonic() - start - sent_s


def test_every_byte_passes_each_way_at_no_more_than_the_rate():
    ps_relay, ps_port, worker_relay, worker_port = free_ports(4)
    tasks = [EchoTask(ps_port), EchoTask(worker_port)]
    least_s = (len(PAYLOAD) / RATE) - BURST_S
    with ThrottledLink(RATE, ps=(ps_relay, ps_port), worker=(worker_relay, worker_port)):
        for port in (ps_relay, worker_relay):  # to the ps (the gradients' way) and to the worker (the reads')
            back, there_s, back_s = round_trip(port)
            assert back == PAYLOAD
            assert there_s >= least_s and there_s + back_s >= 2 * least_s, (there_s, back_s)
    for task in tasks:
        task.close()


def test_when_it_stops_its_ports_close_and_its_threads_end_even_mid_connection():
    ps_relay, ps_port, worker_relay, worker_port = free_ports(4)
    before = threading.active_count()
    task = EchoTask(ps_port)  # its thread ends too, once the relay's connection to it closes
    with ThrottledLink(RATE, ps=(ps_relay, ps_port), worker=(worker_relay, worker_port)):
        socket.create_connection(("127.0.0.1", worker_relay), timeout=10).close()  # no task behind: dropped
        held = socket.create_connection(("127.0.0.1", ps_relay), timeout=10)  # open, both ways waiting to read
        held.sendall(b"x")
    deadline = time.monotonic() + 10
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() == before
    for port in (ps_relay, worker_relay):
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0
    held.close()
    task.close()
