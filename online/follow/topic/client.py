"""The Kafka client a followed topic is read with (confluent-kafka, librdkafka): a careful consumer's settings
(`read_committed`, no auto-commit, no consumer group deciding who reads what) and the credentials of this host,
from the file PSCLUSTER_KAFKA_CONFIG names (librdkafka properties, `key=value` a line: SASL, TLS), never from
cluster.json, which summary.json records."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from cluster.topic_address import TopicAddress
from common.errors import Problem, UserError

CREDENTIALS_ENV = "PSCLUSTER_KAFKA_CONFIG"
FETCH_BYTES = 8 << 20  # what one fetch may bring per partition: batched reads, few round trips
CLIENT_QUEUE_KB = 32 << 10  # what the client fetches ahead of the chief's reading, at most (its default is 64 MB)
OURS = {"bootstrap.servers", "group.id", "enable.auto.commit", "isolation.level", "auto.offset.reset"}


def kafka():
    """The confluent_kafka module, or a user error saying how to install it."""
    try:
        import confluent_kafka
        import confluent_kafka.admin  # noqa: F401 - kafka().admin.AdminClient
    except ImportError:
        raise UserError(Problem("training.data_dir", "kafka://...", "is a Kafka topic, but the Kafka client "
                                "(confluent-kafka) is not installed on this host", "run sh roles/bootstrap.sh kafka "
                                "(sh run.sh installs it when cluster.json names a topic)")) from None
    return confluent_kafka


def credentials(environ=os.environ) -> dict[str, str]:
    """This host's client properties from the file CREDENTIALS_ENV names ({} without one)."""
    path = environ.get(CREDENTIALS_ENV)
    if not path:
        return {}
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise UserError(Problem(CREDENTIALS_ENV, path, f"cannot be read ({error.strerror})",
                                "give a readable file of librdkafka properties, key=value a line")) from None
    found = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, equals, value = line.partition("=")
        if not equals or key.strip() in OURS:
            raise UserError(Problem(CREDENTIALS_ENV, f"{path}:{number}", "is not a key=value property, or sets one "
                                    f"the run sets itself ({', '.join(sorted(OURS))})",
                                    "keep only connection properties there (security.protocol, sasl.*, ssl.*)"))
        found[key.strip()] = value.strip()
    return found


def consumer_settings(address: TopicAddress, group: str) -> dict:
    """A consumer that reads where it is told and commits only when asked (the monitoring group `group`); the
    client's own log lines go to the task's log, prefixed as every line there."""
    return {**credentials(), "bootstrap.servers": address.bootstrap, "group.id": group,
            "logger": logging.getLogger("pscluster.kafka"),
            "enable.auto.commit": False, "isolation.level": "read_committed", "auto.offset.reset": "error",
            "enable.partition.eof": False, "fetch.max.bytes": FETCH_BYTES * 4,
            "max.partition.fetch.bytes": FETCH_BYTES, "queued.max.messages.kbytes": CLIENT_QUEUE_KB,
            "socket.timeout.ms": 10_000,
            "topic.metadata.refresh.interval.ms": 10_000}


def settings_error(error) -> UserError:
    """The client refused its settings: one of this host's properties (ours are valid), which no retry mends."""
    return UserError(Problem(CREDENTIALS_ENV, os.environ.get(CREDENTIALS_ENV, "(not set)"), f"holds a property the "
                             f"Kafka client refuses: {error}", "fix or remove that property"))


def admin_settings(address: TopicAddress) -> dict:
    return {**credentials(), "bootstrap.servers": address.bootstrap}
