"""A Kafka topic named as `training.data_dir` (`kafka://HOST:PORT[,HOST:PORT]/TOPIC`): its parts, checked in pure
Python, and what a resume compares of it (the topic, not the bootstrap list, which may change between two starts)."""

from __future__ import annotations

import dataclasses
import re

from common.errors import Problem

SCHEME = "kafka://"
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")  # Kafka's own rule for topic names
_BROKER = re.compile(r"[A-Za-z0-9.-]+:[0-9]{1,5}|\[[0-9A-Fa-f:]+\]:[0-9]{1,5}")
FORM = "kafka://HOST:PORT[,HOST:PORT]/TOPIC"


@dataclasses.dataclass(frozen=True)
class TopicAddress:
    """Where the topic is read from (`brokers`, the bootstrap list) and which topic."""

    brokers: tuple[str, ...]
    topic: str

    @property
    def bootstrap(self) -> str:
        return ",".join(self.brokers)

    def __str__(self) -> str:
        return f"{SCHEME}{self.bootstrap}/{self.topic}"


def is_topic(data_dir) -> bool:
    return isinstance(data_dir, str) and data_dir.startswith(SCHEME)


def parse(data_dir: str) -> TopicAddress | None:
    """The address `data_dir` names, or None when it is no topic or not of the form FORM."""
    if not is_topic(data_dir):
        return None
    brokers, slash, topic = data_dir[len(SCHEME):].partition("/")
    listed = tuple(brokers.split(","))
    if not slash or not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        return None
    if not all(_BROKER.fullmatch(broker) and 0 < int(broker.rsplit(":", 1)[1]) < 65536 for broker in listed):
        return None
    return TopicAddress(listed, topic)


def address_problems(data_dir, field: str) -> list[Problem]:
    """One problem when `data_dir` starts like a topic but is not one."""
    if is_topic(data_dir) and parse(data_dir) is None:
        return [Problem(field, data_dir, f"is not a Kafka topic of the form {FORM} (ports 1-65535, a topic name of "
                        "letters, digits, '.', '_' and '-')", 'use e.g. "kafka://127.0.0.1:9092/clicks"')]
    return []


def resume_identity(data_dir):
    """What a resume compares of `data_dir`: a topic by its name (the Kafka cluster itself is checked against the
    stream's record when the chief first reaches it), a folder as written."""
    address = parse(data_dir) if isinstance(data_dir, str) else None
    return f"{SCHEME}*/{address.topic}" if address else data_dir
