"""A followed Kafka topic read on a thread of the chief, as FolderWatch looks at a folder: records fetched in batches
from where the stream's own record says each partition stands (never a consumer group's offsets) are cut into offset
ranges of a partition (spool.py) once a range holds a piece's bytes or its oldest record waited `data_poll_s`, each
queued for the follow loop as a file landed when its oldest record was produced. New partitions are read from their
start. Ranges a settled checkpoint trained (safe_to_delete.json) are removed, their end committed to the group
`pscluster.<topic>` for lag tools. Reading pauses while too much is not trained yet (pacing.py). A batch taken only
in part (a fault midway) is read again by a new consumer from where what was kept ends."""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

from cluster.topic_address import TopicAddress
from common.errors import UserError
from online.follow.landing import Look
from online.follow.watch import drained
from online.follow.topic import client
from online.follow.topic.lag import Lag, trained_through
from online.follow.topic.pacing import Pacing
from online.follow.topic.retirement import Retirement
from online.follow.topic.source_identity import checked_source, topic_id
from online.follow.topic.spool import HeldRange, Segment, Spool
from online.follow.topic.went_back import WentBack, went_back_error

BATCH = 10_000  # records asked of the client at once
METADATA_EVERY_S = 10.0  # new partitions are looked for this often
RETIRE_EVERY_S = 2.0  # trained ranges removed (and their offsets committed) this often
STOP_WAIT_S = 10.0  # a stop waits this long for the last commit (a broker gone meanwhile: the next run commits)


class TopicWatch:
    """Reads topic `address` into `spool` (its folder is the followed data's root); `piece_bytes` is a piece's
    size, `cut_after_s` how long a range's oldest record waits for more; `log` says what happens."""

    def __init__(self, address: TopicAddress, spool: Spool, *, piece_bytes: int, cut_after_s: float, log,
                 output: Path, prepare=None, batch: int = BATCH):
        self.address, self.spool, self.log = address, spool, log
        self.prepare, self.batch = prepare, batch  # prepare: (the record to keep, why it cannot be trained or '')
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
        self._positions: dict[int, int] = {}  # where each partition's next range starts
        self._assigned: set[int] = set()  # partitions the consumer reads
        self._rewind = False  # a batch was taken in part: the next consumer reads again from what was kept
        self._unreachable_since: float | None = None
        self.pacing = Pacing(piece_bytes, self.lag, log, address)

    def start(self) -> "TopicWatch":
        self._kafka = client.kafka()  # a missing client is a user error at start, not a thread that dies
        self._found.put(Look(landed=[self.spool.landed(name, segment) for name, segment in self.spool.segments()]))
        self._thread.start()
        return self

    def stop(self, wait_s: float = STOP_WAIT_S) -> None:
        """Stops reading, and waits up to `wait_s` for the last commit and the client's close."""
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
                    consumer, rounds["metadata"] = self._connect(kafka), 0.0  # a new one is assigned at once
                else:
                    self._round(kafka, consumer, rounds)
            except kafka.KafkaException as error:
                self._unreachable(str(error))
                consumer = self._after_fault(consumer)
            except Exception as error:  # noqa: BLE001 - a fault of ours: said once, and the next round tries
                if type(error).__name__ not in faults:
                    faults.add(type(error).__name__)
                    self.log.exception("reading %s failed; trying again", self.address)
                consumer = self._after_fault(consumer)
        if consumer is not None:
            self._last_commit(kafka, consumer)
            consumer.close()

    def _after_fault(self, consumer):
        """Waits 2 s; a consumer whose batch was taken only in part is closed (the client has moved past messages
        not kept): the next one reads every partition again from where what was kept ends."""
        self._stopped.wait(2.0)
        if not self._rewind or consumer is None:
            return consumer
        consumer.close()
        self._rewind, self.lag.paused = False, False
        self._assigned.clear()
        return None

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
        self.pacing.apply(consumer)
        messages = consumer.consume(self.batch, timeout=0.5)
        try:
            self._take(kafka, consumer, messages)
        except BaseException:
            self._rewind = True
            raise
        self._cut(time.monotonic())

    def _connect(self, kafka):
        """A consumer once the topic's metadata could be read and the stream's record agrees with it."""
        try:
            consumer = kafka.Consumer(client.consumer_settings(self.address, self.group))
            self._admin = self._admin or kafka.admin.AdminClient(client.admin_settings(self.address))
        except kafka.KafkaException as error:  # a property the client refuses: no retry mends it
            self._fatal = client.settings_error(error)
            self._stopped.set()
            return None
        try:
            metadata = consumer.list_topics(self.address.topic, timeout=10)
            topic = metadata.topics.get(self.address.topic)
            if topic is None or topic.error is not None or not topic.partitions:
                raise kafka.KafkaException(f"topic {self.address.topic} not found ({topic and topic.error})")
            self._fatal = checked_source(self.spool, str(self.address), metadata.cluster_id, self.address.topic,
                                         topic_id(self._admin, self.address.topic))
        except BaseException as error:
            consumer.close()
            if not isinstance(error, kafka.KafkaException):
                raise
            self._unreachable(str(error))
            self._stopped.wait(2.0)
            return None
        if self._fatal is not None:
            consumer.close()
            self._stopped.set()
            return None
        self._reached()
        return consumer

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
        self._reached()
        new = [p for p in sorted(partitions) if p not in self._assigned]
        recorded = self.spool.positions() if set(new) - set(self._positions) else {}
        starts, oldest = {p: self._read_to(p) if p in self._positions else recorded.get(p, 0) for p in new}, {}
        for partition in new:  # all asked before any is taken: a failure midway leaves every one to the next round
            oldest[partition], _ = consumer.get_watermark_offsets(kafka.TopicPartition(self.address.topic, partition),
                                                                  timeout=5)
        assign = [kafka.TopicPartition(self.address.topic, p, max(starts[p], oldest[p])) for p in new]
        if assign:
            consumer.incremental_assign(assign)
            if self.lag.paused:
                consumer.pause(assign)
            self._assigned.update(new)
            for partition in new:
                if oldest[partition] > starts[partition]:
                    self.lag.count_lost(self.log, self.address, partition, starts[partition], oldest[partition],
                                        self._held.get(partition))
                if partition not in self._held:  # a held range goes on at its end, the gap counted lost
                    self._positions[partition] = max(starts[partition], oldest[partition])
            self.log.info("%s: reading partition%s %s from offset%s %s", self.address, "s" * (len(assign) > 1),
                          ", ".join(str(tp.partition) for tp in assign), "s" * (len(assign) > 1),
                          ", ".join(str(tp.offset) for tp in assign))
        self.lag.watermarks(consumer, kafka, self.address.topic, self._positions)

    def _take(self, kafka, consumer, messages) -> None:
        for message in messages:
            error = message.error()
            if error is not None:
                self._error(kafka, consumer, error, message)
                continue
            partition, value = message.partition(), message.value() or b""
            held = self._held.setdefault(partition, HeldRange(self._positions[partition], time.monotonic()))
            value, why = self.prepare(value) if self.prepare else (value, "")
            if why:
                held.end = message.offset() + 1
                self.lag.count_malformed(self.log, self.address, partition, message.offset(), why, held)
            else:
                held.add(value, message.offset(), message.timestamp())
            self._reached()

    def _error(self, kafka, consumer, error, message) -> None:
        if error.code() not in (kafka.KafkaError.OFFSET_OUT_OF_RANGE, kafka.KafkaError._AUTO_OFFSET_RESET):
            self._unreachable(error.str())
            return
        partition = message.partition()  # retention deleted records not read yet: read on from the oldest left
        position = self._read_to(partition)
        low, high = consumer.get_watermark_offsets(kafka.TopicPartition(self.address.topic, partition), timeout=5)
        if high < position:
            self._went_back(partition, high, position)
            return
        if low > position:
            self.lag.count_lost(self.log, self.address, partition, position, low,
                                self._held.get(partition))
            if partition not in self._held:
                self._positions[partition] = low
        consumer.seek(kafka.TopicPartition(self.address.topic, partition, max(low, position)))  # fetching again

    def _read_to(self, partition: int) -> int:
        """Where the partition's messages kept end: its held range's end, or where its next range starts."""
        held = self._held.get(partition)
        return held.end if held else self._positions[partition]

    def _went_back(self, partition: int, end: int, position: int) -> None:
        self._fatal = went_back_error(str(self.address), partition, end, position)
        self._stopped.set()

    def _cut(self, now: float) -> None:
        """Ranges that hold a piece's bytes, or whose oldest record waited cut_after_s, become files."""
        for partition, held in list(self._held.items()):
            if held.bytes < self.piece_bytes and now - held.since < self.cut_after_s:
                continue
            segment = Segment(partition, held.first, held.end, len(held.records), held.oldest or time.time())
            counts = self.lag.recorded(self._held, partition)
            path = self.spool.write(segment, held.records, {**self._positions, partition: held.end}, counts)
            self._positions[partition] = held.end  # only once written: other ranges' records never pass it
            self.pacing.cut(held.bytes)
            del self._held[partition]
            self._put(Look(landed=[self.spool.landed(path.name, segment)]))

    def pending(self, untrained_bytes: int) -> None:
        """The follow loop's count, each beat, of the bytes landed and not yet trained."""
        self.pacing.pending(untrained_bytes)

    def _retire(self, kafka, consumer) -> None:
        """Ranges a settled checkpoint trained are removed; each partition's trained end goes to the monitoring
        group; the partitions' end offsets are read for the lag."""
        names = self.retirement.trained()
        removed = self.spool.remove(self.retirement.due(names, [name for name, _ in self.spool.segments()]))
        if removed:
            self._put(Look(gone={name: "trained into a settled checkpoint: removed from the stream"
                                 for name in removed}))
        self._commit_trained(kafka, consumer, names)
        self.lag.watermarks(consumer, kafka, self.address.topic, self._positions)
        went_back = self._unreachable_since is None and self._went_back_check.check(
            kafka, self.address.topic, self.lag.ends, self._positions)
        if went_back:
            self._went_back(*went_back)

    def _commit_trained(self, kafka, consumer, trained: set[str]) -> None:
        """Each partition's end of the ranges `trained` (those safe_to_delete.json lists) goes to the group."""
        untrained = [s for name, s in self.spool.segments() if name not in trained]
        untrained += [Segment(partition, held.first, held.end) for partition, held in self._held.items()]
        self.lag.commit(consumer, kafka, self.address.topic, trained_through(self._positions, untrained))

    def _last_commit(self, kafka, consumer) -> None:
        """At a stop, the end of what the last safe_to_delete.json lists (the last round may have run before it was
        written); not after an error that stops the run, a batch taken in part, or with the broker out of reach."""
        if self._fatal is None and not self._rewind and self._unreachable_since is None:
            self._commit_trained(kafka, consumer, self.retirement.trained())
