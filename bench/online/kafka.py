"""`python -m bench.online.kafka [--quick]`: a Kafka topic followed against the same records in files, into
bench/RESULTS-kafka.md (machine and date; not with --quick, which only proves the bench runs).

On one loopback cluster (2 workers, 1 ps; each scenario a fresh chief and output directory) and a Kafka-protocol
broker (Tansu, as the tests start it: tests/kafkakit.py), the same generated Criteo lines (dlrm, batch 256 per
worker) are trained once:
- `files`: follow mode over Criteo files there from the start, in pieces of `piece_mb`;
- `topic`: the same lines, a message each, produced to a topic of 4 partitions before the chief starts;
- `freshness`: a batch of lines produced every `produce_every_s` while the chief follows the topic, with a delta
  every 10 s: seconds from a range's oldest message being produced to the first version or delta serving it;
- `fast producer`: twice the lines waiting in the topic when the chief starts, as a producer far ahead of training
  leaves them: the chief's peak memory, and the most of the stream held on its disk, against its bound.
Examples/s count training only: from the first piece started to the last file (or range) done.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import fire

from bench.__main__ import machine
from bench.kit.cluster import PYTHON, ROOT, LoopbackCluster, peak_rss_mib
from bench.online.follow import MODEL, run_chief, write_files

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import criteokit  # noqa: E402
from kafkakit import Producer, running_broker  # noqa: E402

SIZES = {"quick": {"files": 2, "rows": 2000, "piece_mb": 0.1, "batches": 3, "produce_every_s": 5.0},
         "full": {"files": 4, "rows": 50_000, "piece_mb": 2.0, "batches": 12, "produce_every_s": 10.0}}
PARTITIONS = 4


def lines(rows: int, first: int) -> list[bytes]:
    return [criteokit.line(row).encode() for row in criteokit.rows(rows, first=first)]


def rate(summary: dict) -> dict:
    files = summary["follow"]["per_file"]
    seconds = max(f["done"] for f in files) - min(f["started"] for f in files)
    examples = summary["follow"]["examples"]
    return {"examples": examples, "examples_per_s": examples / seconds, "ranges": len(files)}


def from_files(cluster, work: Path, size: dict) -> dict:
    data = work / "data"
    write_files(data, size["files"], size["rows"])
    return rate(run_chief(cluster, work / "output", data_dir=str(data), follow_data=True, piece_mb=size["piece_mb"],
                          data_poll_s=1, settle_s=0, stop_when_idle_s=5, serving_export_every_s=600))


def from_topic(cluster, broker, work: Path, size: dict) -> dict:
    topic = broker.topic(PARTITIONS)
    producer = Producer(broker, topic)
    began = time.monotonic()
    for k in range(size["files"]):
        producer.send(lines(size["rows"], k * size["rows"]))
    produced_s = time.monotonic() - began
    figures = rate(run_chief(cluster, work / "output", data_dir=broker.url(topic), follow_data=True,
                             piece_mb=size["piece_mb"], data_poll_s=1, stop_when_idle_s=5,
                             serving_export_every_s=600))
    return {**figures, "produced_per_s": size["files"] * size["rows"] / produced_s}


def freshness(cluster, broker, work: Path, size: dict) -> dict:
    """A batch of a file's rows every produce_every_s while the chief follows; per range, produced -> served."""
    topic = broker.topic(PARTITIONS)
    producer = Producer(broker, topic)

    def produce() -> None:
        for k in range(size["batches"]):
            time.sleep(size["produce_every_s"])
            producer.send(lines(size["rows"] // 4, k * size["rows"]))

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    summary = run_chief(cluster, work / "output", data_dir=broker.url(topic), follow_data=True,
                        piece_mb=size["piece_mb"], data_poll_s=1, stop_when_idle_s=size["produce_every_s"] + 15,
                        serving_export_every_s=60, serving_delta_every_s=10)
    thread.join()
    served = sorted(f["freshness_s"] for f in summary["follow"]["per_file"] if f.get("freshness_s") is not None)
    return {"ranges": len(served), "p50_s": statistics.median(served),
            "p95_s": served[min(len(served) - 1, int(0.95 * len(served)))]}


def fast_producer(cluster, broker, work: Path, size: dict) -> dict:
    """Twice the files' lines waiting in the topic when the chief starts (a producer far ahead of training), in
    pieces of a quarter of `piece_mb`: the chief's peak memory, and the stream's peak bytes against its bound."""
    topic = broker.topic(PARTITIONS)
    producer = Producer(broker, topic)
    for k in range(size["files"] * 2):  # the backlog is there at the start: as far ahead as a producer gets
        producer.send(lines(size["rows"], k * size["rows"]))
    output, peak = work / "output", {"stream": 0, "rss": 0.0}
    options = {**MODEL, "follow_data": True, "data_dir": broker.url(topic), "piece_mb": size["piece_mb"] / 4,
               "data_poll_s": 1, "stop_when_idle_s": 10, "serving_export_every_s": 600}
    output.mkdir(parents=True)
    with open(output / "chief.log", "w") as log:
        chief = subprocess.Popen([PYTHON, "-m", "coordinator.train", "--cluster", str(cluster.path), "--output_dir",
                                  str(output), *(f"--{key}={value if isinstance(value, bool) else json.dumps(value)}"
                                                 for key, value in options.items())],
                                 cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        while chief.poll() is None:
            stream = output / "stream"
            held = sum(p.stat().st_size for p in stream.glob("p*")) if stream.exists() else 0
            peak["stream"] = max(peak["stream"], held)
            peak["rss"] = max(peak["rss"], peak_rss_mib(chief.pid))
            time.sleep(0.5)
    finally:
        chief.kill()
        chief.wait()
    if chief.returncode != 0:
        raise RuntimeError((output / "chief.log").read_text()[-3000:])
    bound = 64 * size["piece_mb"] / 4 * (1 << 20)
    pauses = (output / "chief.log").read_text(errors="replace").count("reading pauses until training catches up")
    return {"stream_peak_mb": peak["stream"] / 1e6, "bound_mb": bound / 1e6, "chief_peak_mib": peak["rss"],
            "pauses": pauses, "backlog_mb": sum(len(line) + 1 for line in lines(size["rows"], 0)) * size["files"] * 2
            / 1e6}


def report(figures: dict, size: dict, about: dict) -> str:
    files, topic = figures["files"], figures["topic"]
    fresh, fast = figures["freshness"], figures["fast producer"]
    return "\n".join([
        "# A Kafka topic followed, against the same records in files", "",
        f"Measured {about['date']} on {about['cores']} cores ({about['cpu']}) by `python -m bench.online.kafka`: "
        f"{size['files']} x {size['rows']:,} Criteo lines, dlrm (20,000-row tables of 16), batch 256 per worker, 2 "
        f"workers + 1 ps on loopback, pieces of {size['piece_mb']} MB; the topic has {PARTITIONS} partitions on "
        f"Tansu 0.6.0 (memory storage). Load average before: {about['load_before']:.1f}.", "",
        "| run | examples | ranges or files | examples/s |", "| --- | ---: | ---: | ---: |",
        f"| files | {files['examples']:,} | {files['ranges']} | {files['examples_per_s']:,.0f} |",
        f"| topic | {topic['examples']:,} | {topic['ranges']} | {topic['examples_per_s']:,.0f} |", "",
        f"Topic against files: {topic['examples_per_s'] / files['examples_per_s']:.2f}x. The producer wrote "
        f"{topic['produced_per_s']:,.0f} messages/s (idempotent, one Python process).", "",
        f"Freshness (a quarter file's lines every {size['produce_every_s']:g} s, deltas every 10 s), produced -> "
        f"served per range: p50 {fresh['p50_s']:.1f} s, p95 {fresh['p95_s']:.1f} s over {fresh['ranges']} ranges.",
        "",
        f"Fast producer (twice the lines, {fast['backlog_mb']:.0f} MB, waiting at start): reading paused "
        f"{fast['pauses']} time(s) at its bound of {fast['bound_mb']:.1f} MB not yet trained; the stream on the "
        f"chief's disk peaked at {fast['stream_peak_mb']:.1f} MB (trained ranges stay 60 s after a checkpoint lists "
        f"them, and the newest 16 stay as the readers' sample); the chief's peak memory was "
        f"{fast['chief_peak_mib']:.0f} MiB.", ""])


def main(quick: bool = False) -> None:
    """Runs every scenario; prints the report, and without --quick writes bench/RESULTS-kafka.md."""
    size = SIZES["quick" if quick else "full"]
    about = machine()
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as temporary, running_broker() as broker:
        work = Path(temporary)
        with LoopbackCluster(work / "cluster", workers=2, ps=1) as cluster:
            figures = {"files": from_files(cluster, work / "files", size),
                       "topic": from_topic(cluster, broker, work / "topic", size),
                       "freshness": freshness(cluster, broker, work / "fresh", size),
                       "fast producer": fast_producer(cluster, broker, work / "fast", size)}
    text = report(figures, size, about)
    print(text)
    if not quick:
        (HERE / "RESULTS-kafka.md").write_text(text)


if __name__ == "__main__":
    fire.Fire(main)
