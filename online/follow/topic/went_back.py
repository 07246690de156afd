"""A topic deleted and created again under its name (or truncated): its partitions start again from offset 0, below
where the run has read. A broker's reported end alone cannot say so (Tansu's lags behind the messages it holds), so
a partition whose end stays below the run's position for BELOW_END_S is asked for the last message the run read:
gone, the topic started again."""

from __future__ import annotations

import time

from common.errors import Problem, UserError

BELOW_END_S = 12.0
PROBE_S = 5.0


class WentBack:
    """Partitions suspected and probed; `settings` make the probing consumer (client.consumer_settings)."""

    def __init__(self, settings: dict):
        self.settings = settings
        self._below_since: dict[int, float] = {}
        self._cleared: set[tuple[int, int]] = set()  # (partition, position) whose last message was found there

    def check(self, kafka, topic: str, ends: dict[int, int], positions: dict[int, int]) -> tuple | None:
        """(partition, its end, where the run read to) of a partition that started again, or None."""
        now = time.monotonic()
        for partition, end in ends.items():
            position = positions.get(partition, 0)
            if end >= position or (partition, position) in self._cleared or position == 0:
                self._below_since.pop(partition, None)
            elif now - self._below_since.setdefault(partition, now) >= BELOW_END_S:
                if not self._holds(kafka, topic, partition, position - 1):
                    return partition, end, position
                self._cleared.add((partition, position))
        return None

    def _holds(self, kafka, topic: str, partition: int, offset: int) -> bool:
        """Whether the partition still holds a message at `offset` (or later): the run's last one is there. A broker
        out of reach raises KafkaException (the watch waits for it): no answer is not an answer."""
        consumer = kafka.Consumer({**self.settings, "group.id": f"{self.settings['group.id']}.probe"})
        try:
            consumer.list_topics(topic, timeout=5)  # raises while the broker cannot be reached
            consumer.assign([kafka.TopicPartition(topic, partition, offset)])
            deadline = time.monotonic() + PROBE_S
            while time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None and message.offset() >= offset:
                    return True
                if message is not None and message.error() is not None:
                    if message.error().code() in (kafka.KafkaError.OFFSET_OUT_OF_RANGE,
                                                  kafka.KafkaError._AUTO_OFFSET_RESET):  # librdkafka's wording of it
                        return False
                    raise kafka.KafkaException(message.error())  # out of reach now: decided later
            consumer.list_topics(topic, timeout=5)  # still reached: its silence is an answer
            return False
        finally:
            consumer.close()


def went_back_error(address: str, partition: int, end: int, position: int) -> UserError:
    return UserError(Problem("training.data_dir", address, f"partition {partition} ends at offset {end}, below offset "
                             f"{position} this run has read to: the topic was deleted and created again (or "
                             "truncated)", "follow the new topic in another output_dir (sh run.sh --fresh)"))
