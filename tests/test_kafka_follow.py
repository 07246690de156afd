"""A Kafka topic followed on real servers and a real Kafka-protocol broker (tests/kafkakit.py): every message
produced trained once, malformed ones skipped and counted, partitions read from the run's own record of offsets
(never a consumer group's), a chief SIGKILLed mid-stream resumed without a message trained twice into the model,
a broker frozen for a while waited for, and trained offsets committed to the monitoring group."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

import criteokit
from clusterkit import derive_cluster, finish, start_module, wait_for_line
from data.folder import SAMPLE_FILES
from kafkakit import Producer, running_broker
from test_follow import wait_for_pattern

pytestmark = pytest.mark.cluster

FOLLOW = {"model": "dlrm", "table_rows": 64, "embedding_dim": 4, "bottom_mlp": [8], "top_mlp": [8],
          "per_worker_batch": 16, "min_shard_bytes": 256, "dataset": "criteo", "follow_data": True,
          "data_poll_s": 0.5, "piece_mb": 0.02, "checkpoint_every_s": 3, "serving_export_every_s": 4,
          "progress_every_s": 2, "keep_serving_versions": 1, "serving_delta_every_s": 2}
BAD = [b"not a click line", b"1\tx\ty"]


@pytest.fixture
def broker():
    with running_broker() as running:
        yield running


def lines(count: int, first: int) -> list[bytes]:
    return [criteokit.line(row).encode() for row in criteokit.rows(count, first=first)]


def summary_of(output) -> dict:
    return json.loads((output / "summary.json").read_text())


def committed(broker, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"pscluster.{topic}"})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def check_trained_once(output, produced: int, malformed: int) -> dict:
    """Every good message in one range's examples, no range twice, and no step in the model that no range counts."""
    summary = summary_of(output)
    follow = summary["follow"]
    per_file = follow["per_file"]
    assert sum(f["examples"] for f in per_file) == produced - malformed, per_file
    assert sum(f.get("skipped", 0) for f in per_file) == malformed
    names = [f["name"] for f in per_file]
    assert len(names) == len(set(names))
    ends: dict[int, int] = {}
    for name in sorted(names):  # the ranges of each partition follow one another, none twice, none missing
        partition, first, end = (int(part) for part in name.removeprefix("p").split("-"))
        assert first == ends.get(partition, 0), names
        ends[partition] = end
    assert summary["optimizer_steps"] == follow["steps"]
    assert follow["topic"]["messages_lost"] == 0
    return summary


def test_a_topic_followed_trains_every_message_once_through_a_chief_killed_and_a_frozen_broker(shared_servers,
                                                                                             tmp_path, broker):
    topic = broker.topic(partitions=2)
    producer = Producer(broker, topic)
    output, log = tmp_path / "output", tmp_path / "chief.log"
    cluster = derive_cluster(shared_servers, tmp_path, training={
        **FOLLOW, "data_dir": broker.url(topic), "output_dir": str(output)}, evaluation={
        "poll_s": 0.5, "idle_timeout_s": 200, "progressive_examples": 200})
    producer.send(lines(300, 0) + BAD)
    chief = start_module("coordinator.train", "--cluster", str(cluster), log_path=log)
    evaluator = start_module("evaluator.sidecar", "--cluster", str(cluster), log_path=tmp_path / "evaluator.log")
    resumed = chief
    try:
        assert wait_for_line(log, "serving | version", 240, chief), log.read_text()[-3000:]
        producer.send(lines(400, 300))
        assert wait_for_pattern(log, r"p\d{5}-0{17}[1-9]\d\d-\d{20}: started", 120)  # a range of the second batch
        chief.send_signal(signal.SIGKILL)
        chief.wait(timeout=30)
        broker.freeze()  # the resumed chief finds no broker, waits and says so
        resumed = start_module("coordinator.train", "--cluster", str(cluster), "--stop_when_idle_s", "8",
                               log_path=tmp_path / "resumed.log")
        assert wait_for_line(tmp_path / "resumed.log", "cannot be read now", 120, resumed)
        broker.thaw()
        producer.send(lines(200, 700))
        codes = finish(resumed, evaluator, timeout_s=400)
    finally:
        broker.thaw()
        finish(chief, resumed, evaluator, timeout_s=1)
    resumed_log = (tmp_path / "resumed.log").read_text()
    assert codes == [0, 0], resumed_log[-3000:] + (tmp_path / "evaluator.log").read_text()[-3000:]
    assert "resuming" in resumed_log and "reached again" in resumed_log
    summary = check_trained_once(output, 900 + len(BAD), len(BAD))
    assert summary["follow"]["files_done"] == len(summary["follow"]["per_file"])
    partitions = committed(broker, topic, 2)
    positions = json.loads((output / "stream" / ".positions.json").read_text())["next"]
    assert partitions == {int(p): offset for p, offset in positions.items()}  # every range trained: all committed
    left = {p.name for p in (output / "stream").iterdir() if not p.name.startswith(".")}  # trained ones go...
    assert len(left) <= SAMPLE_FILES and left <= {f["name"] for f in summary["follow"]["per_file"]}  # ...a sample stays
    assert "messages behind its end" in log.read_text() + resumed_log


PARSER = """
import json

import tensorflow as tf

KINDS = {int: lambda v: tf.train.Feature(int64_list=tf.train.Int64List(value=v)),
         float: lambda v: tf.train.Feature(float_list=tf.train.FloatList(value=v)),
         str: lambda v: tf.train.Feature(bytes_list=tf.train.BytesList(value=[x.encode() for x in v]))}
TYPES = {"price": float, "position": float, "clicked": int, "visits": int, "item": int, "country": str, "tags": str}


def click(message):
    if not message.startswith(b"{"):
        return message  # a serialized tf.train.Example, from a producer not moved to JSON yet
    row = json.loads(message)
    return tf.train.Example(features=tf.train.Features(feature={name: KINDS[TYPES[name]](values)
                                                                for name, values in row.items()}))
"""


def as_json(example) -> bytes:
    """A tf.train.Example's features as a JSON object of lists, as a producer of JSON clicks would send it."""
    row = {}
    for name, feature in example.features.feature.items():
        values = list(getattr(feature, feature.WhichOneof("kind")).value)
        row[name] = [value.decode() if isinstance(value, bytes) else value for value in values]
    return json.dumps(row).encode()


def test_examples_from_a_topic_heal_a_worker_and_a_ps_killed_mid_stream(tmp_path, broker):
    """Serialized tf.train.Examples as messages (the TFRecord schema), then JSON clicks through the user's own
    parser (training.topic_parser), a run started as a user starts one, a worker and then a ps SIGKILLed while
    ranges train: the launcher heals both, and every good message is trained, once by name; the steps a killed
    worker took stay in the model (at least once), none is lost."""
    import numpy as np

    import datakit
    from clusterkit import ROOT, cluster_document, wait_for_launcher, write_cluster
    from launcher import process

    topic, logs, output = broker.topic(partitions=2), tmp_path / "logs", tmp_path / "output"
    producer = Producer(broker, topic)
    rng = np.random.default_rng(0)

    def examples(count: int, first: int, form=lambda example: example.SerializeToString()) -> list[bytes]:
        return [form(datakit.click_example(number, rng)) for number in range(first, first + count)]

    (tmp_path / "json_clicks.py").write_text(PARSER)

    training = {**FOLLOW, "dataset": "tfrecord", "tfrecord_features": datakit.CLICK_SCHEMA,
                "numeric_features": datakit.CLICK_NUMERIC, "categorical_features": datakit.CLICK_CATEGORICAL,
                "data_dir": broker.url(topic), "output_dir": str(output), "stop_when_idle_s": 10,
                "topic_parser": "json_clicks:click",
                "serving_delta_every_s": 0, "serving_export_every_s": 600}
    document = cluster_document(workers=2, ps=1, evaluator=False, logs_dir=str(logs), training=training)
    document["launcher"].update(restart_backoff_s=0.5, poll_s=0.5)
    path = write_cluster(tmp_path, document)
    producer.send(examples(300, 0) + [b"junk"])
    chief_log = logs / "chief-0.log"
    try:
        started = subprocess.run(["sh", str(ROOT / "run.sh"), "--detach", str(path)], capture_output=True,
                                 text=True, timeout=120, stdin=subprocess.DEVNULL,
                                 env={**os.environ, "PYTHONPATH": str(tmp_path)})  # where json_clicks is
        assert started.returncode == 0, started.stderr
        assert wait_for_pattern(chief_log, r"done, \d+ examples", 240), chief_log.read_text()[-3000:]
        at = len(chief_log.read_text(errors="replace"))
        producer.send(examples(300, 300))
        assert wait_for_pattern(chief_log, r"tfrecord: started", 120, after=at)
        os.killpg(process.PidRecord.read(logs / "worker-1.pid").pid, signal.SIGKILL)  # while ranges train
        at = len(chief_log.read_text(errors="replace"))
        producer.send(examples(300, 600))
        assert wait_for_pattern(chief_log, r"done, \d+ examples", 240, after=at), chief_log.read_text()[-3000:]
        at = len(chief_log.read_text(errors="replace"))
        producer.send(examples(100, 900, as_json) + [b"junk again", b'{"clicked": [1'])  # the rest as JSON
        assert wait_for_pattern(chief_log, r"tfrecord: started", 120, after=at)
        os.killpg(process.PidRecord.read(logs / "ps-0.pid").pid, signal.SIGKILL)
        launcher_log = wait_for_launcher(logs)
    finally:
        subprocess.run(["sh", str(ROOT / "kill.sh"), str(path)], capture_output=True, timeout=180)
    assert "worker:1 died; restarting" in launcher_log and "ps:0 died" in launcher_log, launcher_log[-3000:]
    summary = summary_of(output)
    follow = summary["follow"]
    assert sum(f["examples"] for f in follow["per_file"]) == 1000, follow["per_file"]
    assert follow["topic"]["messages_malformed"] == 3 and follow["topic"]["messages_lost"] == 0
    assert "training.topic_parser raised JSONDecodeError" in chief_log.read_text()
    assert summary["optimizer_steps"] >= follow["steps"]  # a killed worker's steps stay in the model
    assert "resuming" in chief_log.read_text()
