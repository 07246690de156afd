"""A followed Kafka topic read on a thread of the chief, as FolderWatch looks at a folder: records fetched in batches
from where the stream's own record says each partition stands (never a consumer group's offsets) are cut into offset
ranges of a partition (spool.py) once a range holds a piece's bytes or its oldest record waited `data_poll_s`, each
queued for the follow loop as a file landed when its oldest record was produced. New partitions are read from their
start. Ranges a settled checkpoint trained (safe_to_delete.json) are removed, their end committed to the group
`pscluster.<topic>` for lag tools. Reading pauses while what is not trained yet (the loop says: `pending`) holds
SPOOL_AHEAD_PIECES pieces: a producer faster than training grows lag, not the chief's memory or disk."""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

from cluster.topic_address import TopicAddress
from common.errors import UserError
from online.follow.identity import head_of
from online.follow.intake import size_text
from online.follow.landing import Landed, Look
from online.follow.watch import drained
from online.follow.topic import client
from online.follow.topic.lag import Lag, trained_through
from online.follow.topic.retirement import Retirement
from online.follow.topic.source_identity import source_problem, topic_id
from online.follow.topic.spool import HeldRange, Segment, Spool
from online.follow.topic.went_back import WentBack, went_back_error

BATCH = 10_000  # records asked of the client at once
SPOOL_AHEAD_PIECES = 64  # ranges written but not yet trained, in pieces, before reading pauses
METADATA_EVERY_S = 10.0  # new partitions are looked for this often
RETIRE_EVERY_S = 2.0  # trained ranges removed (and their offsets committed) this often
MALFORMED_SAID = 10  # malformed messages said in the log; all are counted


class TopicWatch:
    """Reads topic `address` into `spool` (its folder is the followed data's root); `piece_bytes` is a piece's
    size, `cut_after_s` how long a range's oldest record waits for more; `log` says what happens."""

    def __init__(self, address: TopicAddress, spool: Spool, *, piece_bytes: int, cut_after_s: float, log,
                 output: Path, problem=None, batch: int = BATCH):
        self.address, self.spool, self.log = address, spool, log
        self.problem, self.batch = problem, batch  # problem: why a record cannot be trained ('' when it can)
        self.piece_bytes, self.cut_after_s, self.group = piece_bytes, cut_after_s, f"pscluster.{address.topic}"
        self.lag = Lag(**spool.counts())  # what earlier chiefs of this run counted
        self._went_back_check = WentBack(client.consumer_settings(address, self.group))
        self.retirement = Retirement(spool.root, output)
        self._found: queue.Queue = queue.Queue()
        self._stopped = threading.Event()
        self._fatal: UserError | None = None
        self._thread = threading.Thread(target=self._run, name="topic-watch", daemon=True)
        self._kafka = self._admin = None
        self._held: dict[int, HeldRange] = {}
        self._positions: dict[int, int] = {}
        self._unreachable_since: float | None = None
        self._untrained = self._cut_since = 0  # bytes not yet trained: pending() and _cut()

    def start(self) -> "TopicWatch":
        self._kafka = client.kafka()  # a missing client is a user error at start, not a thread that dies
        self._found.put(Look(landed=[self._landed(name, segment) for name, segment in self.spool.segments()]))
        self._thread.start()
        return self

    def stop(self, wait_s: float = 0.0) -> None:
        """Stops reading; with `wait_s`, waits that long for the client to close."""
        self._stopped.set()
        self._thread.join(timeout=wait_s)

    def line(self) -> str:
        return self.lag.text()

    def summary(self) -> dict:
        return {"topic": {"address": str(self.address), **self.lag.summary()}}

    def looks(self) -> list[Look]:
        """What was read since the last call, oldest first; raises the error that stops the run (another topic or
        Kafka cluster than the stream's record names)."""
        if self._fatal is not None:
            raise self._fatal
        return drained(self._found)

    def _run(self) -> None:
        """Reads until stopped; a fault in one round (the broker gone mid-call, or one of ours, said once per kind)
        is waited out and the next round tries again: the thread ends only when stopped."""
        kafka, consumer, faults = self._kafka, None, set()
        rounds = {"metadata": 0.0, "retire": 0.0}
        while not self._stopped.is_set():
            try:
                if consumer is None:
                    consumer = self._connect(kafka)
                else:
                    self._round(kafka, consumer, rounds)
            except kafka.KafkaException as error:
                self._unreachable(str(error))
                self._stopped.wait(2.0)
            except Exception as error:  # noqa: BLE001 - a fault of ours: said once, and the next round tries
                if type(error).__name__ not in faults:
                    faults.add(type(error).__name__)
                    self.log.exception("reading %s failed; trying again", self.address)
                self._stopped.wait(2.0)
        if consumer is not None:
            consumer.close()

    def _round(self, kafka, consumer, rounds: dict) -> None:
        """New partitions every METADATA_EVERY_S, trained ranges retired every RETIRE_EVERY_S, then a batch read
        and the ranges due cut into files."""
        now = time.monotonic()
        if now >= rounds["metadata"]:
            rounds["metadata"] = now + METADATA_EVERY_S
            self._assign_new(kafka, consumer)
        if now >= rounds["retire"]:
            rounds["retire"] = now + RETIRE_EVERY_S
            self._retire(kafka, consumer)
        self._pace(consumer)
        self._take(kafka, consumer, consumer.consume(self.batch, timeout=0.5))
        self._cut(time.monotonic())

    def _connect(self, kafka):
        """A consumer once the topic's metadata could be read and the stream's record agrees with it."""
        consumer = kafka.Consumer(client.consumer_settings(self.address, self.group))
        self._admin = self._admin or kafka.admin.AdminClient(client.admin_settings(self.address))
        try:
            metadata = consumer.list_topics(self.address.topic, timeout=10)
            topic = metadata.topics.get(self.address.topic)
            if topic is None or topic.error is not None or not topic.partitions:
                raise kafka.KafkaException(f"topic {self.address.topic} not found ({topic and topic.error})")
            self._check_source(metadata.cluster_id, topic_id(self._admin, self.address.topic))
        except kafka.KafkaException as error:
            consumer.close()
            self._unreachable(str(error))
            self._stopped.wait(2.0)
            return None
        if self._fatal is not None:
            consumer.close()
            self._stopped.set()
            return None
        self._reached()
        return consumer

    def _check_source(self, cluster_id: str | None, found_id: str | None) -> None:
        """The stream's files came from one Kafka cluster and topic (source_identity.py): another one stops the run.
        A record without the topic's id takes it now."""
        recorded = self.spool.source()
        if recorded:
            self._fatal = source_problem(recorded, str(self.address), cluster_id, self.address.topic, found_id)
        if self._fatal is None and (not recorded or (found_id and not recorded.get("topic_id"))):
            self.spool.record_source({"cluster_id": cluster_id, "topic": self.address.topic, "topic_id": found_id})

    def _unreachable(self, why: str) -> None:
        """The topic cannot be read now: said once, and the run is not idle meanwhile (stop_when_idle_s waits)."""
        if self._unreachable_since is None:
            self._unreachable_since = time.monotonic()
            self.log.warning("%s: cannot be read now (%s); waiting for it, trying again every 2 s", self.address, why)
            self._put(Look())

    def _reached(self) -> None:
        if self._unreachable_since is not None:
            self.log.info("%s: reached again after %.0f s", self.address, time.monotonic() - self._unreachable_since)
            self._unreachable_since = None
            self._put(Look())

    def _put(self, look: Look) -> None:
        """Queues a look, saying whether the topic waits to be reached (the follow loop is not idle while it does)."""
        if self._unreachable_since is not None:
            look.waiting = {str(self.address): "the topic cannot be read now"}
        self._found.put(look)

    def _assign_new(self, kafka, consumer) -> None:
        """Partitions not read yet start where the stream's record says, or at their start (retention may have
        deleted some records already: counted lost)."""
        try:
            partitions = consumer.list_topics(self.address.topic, timeout=5).topics[self.address.topic].partitions
        except (kafka.KafkaException, KeyError) as error:
            self._unreachable(str(error))
            return
        new = [p for p in sorted(partitions) if p not in self._positions]
        recorded = self.spool.positions() if new else {}
        starts, oldest = {p: recorded.get(p, 0) for p in new}, {}
        for partition in new:  # all asked before any is taken: a failure midway leaves every one to the next round
            oldest[partition], _ = consumer.get_watermark_offsets(kafka.TopicPartition(self.address.topic, partition),
                                                                  timeout=5)
        assign = [kafka.TopicPartition(self.address.topic, p, max(starts[p], oldest[p])) for p in new]
        if assign:
            consumer.incremental_assign(assign)
            for partition in new:
                if oldest[partition] > starts[partition]:
                    self._lost(partition, starts[partition], oldest[partition])
                self._positions[partition] = max(starts[partition], oldest[partition])
            self.log.info("%s: reading partition%s %s from offset%s %s", self.address, "s" * (len(assign) > 1),
                          ", ".join(str(tp.partition) for tp in assign), "s" * (len(assign) > 1),
                          ", ".join(str(tp.offset) for tp in assign))
        self.lag.watermarks(consumer, kafka, self.address.topic, self._positions)

    def _lost(self, partition: int, start: int, low: int) -> None:
        self.lag.lost += low - start
        self.log.warning("%s: partition %d: offsets %d-%d were deleted (the topic's retention) before they were "
                         "trained: counted lost", self.address, partition, start, low - 1)

    def _take(self, kafka, consumer, messages) -> None:
        for message in messages:
            error = message.error()
            if error is not None:
                self._error(kafka, consumer, error, message)
                continue
            partition, value = message.partition(), message.value() or b""
            held = self._held.setdefault(partition, HeldRange(self._positions[partition], time.monotonic()))
            why = self.problem(value) if self.problem else ""
            if why:
                held.end = message.offset() + 1
                self._malformed(partition, message.offset(), why)
            else:
                held.add(value, message.offset(), message.timestamp())
            self._reached()

    def _malformed(self, partition: int, offset: int, why: str) -> None:
        self.lag.malformed += 1
        if self.lag.malformed <= MALFORMED_SAID:
            self.log.info("%s: partition %d offset %d: skipped, %s (malformed messages are counted in the summary; "
                          "the first %d are said)", self.address, partition, offset, why, MALFORMED_SAID)

    def _error(self, kafka, consumer, error, message) -> None:
        if error.code() not in (kafka.KafkaError.OFFSET_OUT_OF_RANGE, kafka.KafkaError._AUTO_OFFSET_RESET):
            self._unreachable(error.str())
            return
        partition = message.partition()  # retention deleted records not read yet: read on from the oldest left
        held = self._held.get(partition)
        position = held.end if held else self._positions[partition]
        low, high = consumer.get_watermark_offsets(kafka.TopicPartition(self.address.topic, partition), timeout=5)
        if high < position:
            self._went_back(partition, high, position)
        elif low > position:
            self._lost(partition, position, low)
            if held is None:
                self._positions[partition] = low
            consumer.seek(kafka.TopicPartition(self.address.topic, partition, max(low, position)))

    def _went_back(self, partition: int, end: int, position: int) -> None:
        self._fatal = went_back_error(str(self.address), partition, end, position)
        self._stopped.set()

    def _cut(self, now: float) -> None:
        """Ranges that hold a piece's bytes, or whose oldest record waited cut_after_s, become files."""
        for partition, held in list(self._held.items()):
            if held.bytes < self.piece_bytes and now - held.since < self.cut_after_s:
                continue
            segment = Segment(partition, held.first, held.end, len(held.records), held.oldest or time.time())
            self._positions[partition] = held.end
            path = self.spool.write(segment, held.records, self._positions, self.lag.counts())
            self._cut_since += held.bytes
            del self._held[partition]
            self._put(Look(landed=[self._landed(path.name, segment)]))

    def _landed(self, name: str, segment: Segment) -> Landed:
        stat = (self.spool.root / name).stat()
        return Landed(name, stat.st_size, stat.st_mtime, segment.oldest or stat.st_mtime, stat.st_dev, stat.st_ino,
                      head_of(self.spool.root / name))

    def pending(self, untrained_bytes: int) -> None:
        """The follow loop's count, each beat, of the bytes landed and not yet trained."""
        self._untrained, self._cut_since = untrained_bytes, 0

    def _pace(self, consumer) -> None:
        """Pauses reading while the ranges not yet trained (as the loop last counted them, and those cut since)
        hold SPOOL_AHEAD_PIECES pieces; resumes below half."""
        ahead = self._untrained + self._cut_since
        assigned = consumer.assignment()
        if ahead >= SPOOL_AHEAD_PIECES * self.piece_bytes and not self.lag.paused:
            consumer.pause(assigned)
            self.lag.paused = True
            self.log.info("%s: %s read and not yet trained: reading pauses until training catches up",
                          self.address, size_text(ahead))
        elif self.lag.paused and ahead < SPOOL_AHEAD_PIECES * self.piece_bytes // 2:
            consumer.resume(assigned)
            self.lag.paused = False

    def _retire(self, kafka, consumer) -> None:
        """Ranges a settled checkpoint trained are removed; each partition's trained end goes to the monitoring
        group; the partitions' end offsets are read for the lag."""
        names = self.retirement.trained()
        removed = self.spool.remove(self.retirement.due(names, [name for name, _ in self.spool.segments()]))
        if removed:
            self._put(Look(gone={name: "trained into a settled checkpoint: removed from the stream"
                                 for name in removed}))
        untrained = [s for name, s in self.spool.segments() if name not in names]
        untrained += [Segment(partition, held.first, held.end) for partition, held in self._held.items()]
        self.lag.commit(consumer, kafka, self.address.topic, trained_through(self._positions, untrained))
        self.lag.watermarks(consumer, kafka, self.address.topic, self._positions)
        went_back = self._unreachable_since is None and self._went_back_check.check(
            kafka, self.address.topic, self.lag.ends, self._positions)
        if went_back:
            self._went_back(*went_back)

