"""How far a followed topic's reading is behind its producers, for the progress line, `status` and the summary:
messages between where each partition is read and its end offset as the broker reports it (approximate: a broker
may report its end late, and transaction markers take offsets too), messages lost to the topic's retention, and
the offsets trained into a settled checkpoint, committed to a consumer group for standard lag tools only (no run
reads them back)."""

from __future__ import annotations

import time

WATERMARKS_EVERY_S = 5.0
MALFORMED_SAID = 10  # malformed messages said in the log; all are counted


class Lag:
    def __init__(self, *, lost: int = 0, malformed: int = 0):
        self.behind = 0  # messages past what was read, summed over partitions
        self.lost = lost  # offsets deleted by retention before they were read
        self.malformed = malformed  # messages the chief skipped (workers count a file's malformed lines themselves)
        self.paused = False  # reading waits for training (the stream holds its bound of untrained ranges)
        self.committed: dict[int, int] = {}
        self.ends: dict[int, int] = {}  # each partition's end offset as the broker reported it last
        self._read_at = 0.0

    def watermarks(self, consumer, kafka, topic: str, positions: dict[int, int]) -> None:
        """The partitions' end offsets, read at most every WATERMARKS_EVERY_S (one request per partition)."""
        if time.monotonic() - self._read_at < WATERMARKS_EVERY_S:
            return
        self._read_at = time.monotonic()
        behind, ends = 0, {}
        for partition, position in positions.items():
            try:
                _, ends[partition] = consumer.get_watermark_offsets(kafka.TopicPartition(topic, partition),
                                                                    timeout=2, cached=False)
            except kafka.KafkaException:
                return  # unreachable now: the last figure stands
            behind += max(0, ends[partition] - position)
        self.behind = behind
        self.ends = ends

    def commit(self, consumer, kafka, topic: str, trained: dict[int, int]) -> None:
        """Each partition's offset up to which every record is trained into a settled checkpoint, committed when it
        moved (for lag tools: `kafka-consumer-groups --describe --group pscluster.<topic>`)."""
        moved = {p: o for p, o in trained.items() if self.committed.get(p) != o}
        if not moved:
            return
        try:
            consumer.commit(offsets=[kafka.TopicPartition(topic, p, o) for p, o in sorted(moved.items())],
                            asynchronous=False)
        except kafka.KafkaException:
            return  # tried again at the next settled checkpoint's look
        self.committed.update(moved)

    def count_lost(self, log, address, partition: int, start: int, low: int, held=None) -> None:
        """Offsets `start` to `low` deleted before they were read; `held`: the range read and not yet written that
        goes on past them, which then holds their count until it is written."""
        self.lost += low - start
        if held is not None:
            held.lost += low - start
        log.warning("%s: partition %d: offsets %d-%d were deleted (the topic's retention) before they were trained: "
                    "counted lost", address, partition, start, low - 1)

    def count_malformed(self, log, address, partition: int, offset: int, why: str, held) -> None:
        """A message skipped; `held`: the range read and not yet written that its offset ends."""
        self.malformed += 1
        held.malformed += 1
        if self.malformed <= MALFORMED_SAID:
            log.info("%s: partition %d offset %d: skipped, %s (malformed messages are counted in the summary; the "
                     "first %d are said)", address, partition, offset, why, MALFORMED_SAID)

    def recorded(self, held: dict, writing: int) -> dict[str, int]:
        """What the stream's record keeps beside the positions written with partition `writing`'s range, so a
        chief started again goes on counting: the counts of the other ranges still `held` left out, since a chief
        started before they are written reads them again and counts them again."""
        others = [range_ for partition, range_ in held.items() if partition != writing]
        return {"lost": self.lost - sum(range_.lost for range_ in others),
                "malformed": self.malformed - sum(range_.malformed for range_ in others)}

    def text(self) -> str:
        paused = ", reading paused for training to catch up" if self.paused else ""
        lost = f", {self.lost} lost to retention" if self.lost else ""
        return f"topic {self.behind} messages behind its end{lost}{paused}"

    def summary(self) -> dict:
        return {"messages_behind": self.behind, "messages_lost": self.lost, "messages_malformed": self.malformed,
                "committed": {str(p): o for p, o in sorted(self.committed.items())}}


def trained_through(positions: dict[int, int], untrained: list) -> dict[int, int]:
    """Per partition, the offset before which every record is trained into a settled checkpoint: the first of its
    ranges not trained yet (`untrained` Segments: files still in the stream, ranges held in memory), or where it
    is read to."""
    return {partition: min([s.first for s in untrained if s.partition == partition] + [position])
            for partition, position in positions.items()}
