"""Byte-range sharding on real servers (2 ps, 2 workers): each worker reads about its half of train.txt, and
the two halves hold every training line exactly once."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import criteokit
from clusterkit import free_ports, processes_mentioning, run_python

pytestmark = pytest.mark.cluster

ROWS = 12_000  # about 3 MB of lines, so the pipeline's reads dwarf anything else a worker reads meanwhile

# Under ParameterServerStrategy the dataset_fn is traced once on the chief: the worker index is a tensor, and
# each worker reads the byte ranges of its own branch. Each closure returns the worker's whole shard (cached, so
# a second closure on the same worker reads nothing again) and that worker's index.
CHIEF = """
import faulthandler, json, sys
faulthandler.dump_traceback_later(50)
import tensorflow as tf
from data import load_source
source = load_source("criteo", sys.argv[1], table_rows=64)
print("sharding:", source.sharding(2), flush=True)
strategy = tf.distribute.experimental.ParameterServerStrategy(
    tf.distribute.cluster_resolver.TFConfigClusterResolver())
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

def dataset_fn():
    index = tf.distribute.coordinator.experimental_get_current_worker_index()
    rows = source._worker_examples(2, index, 0).map(lambda x, y: tf.math.expm1(x["dense"][0]))
    return rows.batch(1 << 16).cache().repeat()

iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

@tf.function
def shard(iterator):
    return tf.distribute.coordinator.experimental_get_current_worker_index(), next(iterator)

seen = {}
for _ in range(40):  # closures go to whichever worker is free: bounded until both answered
    index, rows = coordinator.schedule(shard, args=(iterator,)).fetch()
    seen[int(index)] = sorted(int(round(r)) for r in rows)
    if len(seen) == 2:
        break
print(json.dumps(seen))
"""


def _traced(pid: int, prefix: Path) -> subprocess.Popen:
    """strace on every thread of `pid`: its reads, each with the path of the file read, one file per thread."""
    return subprocess.Popen(["strace", "-qq", "-ff", "-y", "-s", "0", "-e", "trace=read,pread64", "-o", str(prefix),
                             "-p", str(pid)], stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _bytes_read(prefix: Path, path: Path) -> int:
    """Bytes the traced threads read from `path` (other reads, e.g. /proc files TensorFlow polls, excluded)."""
    done = re.compile(r"read(?:64)?\(\d+<" + re.escape(str(path)) + r">.*\) = (\d+)$")
    return sum(int(found[1]) for log in prefix.parent.glob(prefix.name + ".*")
               for found in map(done.search, log.read_text(errors="replace").splitlines()) if found)


def _worker_pids(cluster_path) -> dict[int, int]:
    found = {}
    for line in processes_mentioning(str(cluster_path)):
        pid, command = line.split(": ", 1)
        words = command.split()
        if "--role" in words and words[words.index("--role") + 1] == "worker":
            found[int(words[words.index("--index") + 1])] = int(pid)
    return found


def test_each_worker_reads_its_byte_range_and_all_lines_come_once(shared_servers, tmp_path):
    assert shutil.which("strace"), "strace counts the bytes each worker reads (tests/system_packages.sh installs it)"
    data = tmp_path / "kaggle"
    criteokit.write(data / "train.txt", criteokit.rows(ROWS))
    cluster = json.loads(shared_servers.read_text())["cluster"]
    tf_config = {"cluster": {"chief": [f"localhost:{free_ports(1)[0]}"], "ps": cluster["ps"],
                             "worker": cluster["worker"]}, "task": {"type": "chief", "index": 0}}
    pids = _worker_pids(shared_servers)
    assert sorted(pids) == [0, 1]
    tracers = {k: _traced(pid, tmp_path / f"strace-{k}") for k, pid in pids.items()}
    time.sleep(2)  # strace attached to every thread
    env = {"TF_CONFIG": json.dumps(tf_config), "GRPC_FAIL_FAST": "use_caller", "TF_CPP_MIN_LOG_LEVEL": "2"}
    chief = run_python("-c", CHIEF, str(data), env_changes=env, timeout_s=120)
    (tmp_path / "chief.log").write_text(chief.stderr)
    assert chief.returncode == 0, chief.stderr[-3000:]
    assert "sharded by byte range" in chief.stdout
    for tracer in tracers.values():
        tracer.terminate()
        tracer.wait(timeout=30)
    read = {k: _bytes_read(tmp_path / f"strace-{k}", data / "train.txt") for k in pids}
    shards = {int(k): rows for k, rows in json.loads(chief.stdout.splitlines()[-1]).items()}
    training = 6 * ROWS // 7  # the Kaggle convention: the last 1/7 of train.txt is validation and test
    assert sorted(shards[0] + shards[1]) == list(range(len(shards[0]) + len(shards[1])))
    assert abs(len(shards[0] + shards[1]) - training) < 20
    assert all(0.4 < len(rows) / training * 2 < 1.6 for rows in shards.values())
    train_bytes = (data / "train.txt").stat().st_size * 6 / 7
    for k, count in read.items():  # element sharding would read all of train.txt on each worker
        assert 0.3 * train_bytes < count < 0.75 * train_bytes, (k, count, train_bytes, read)
