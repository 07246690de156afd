"""Publication that survives a crash: a process killed between its flush and its rename, or between best_model's two
renames, leaves the previous version, delta, summary or model whole and loadable; output_dir on an object store is
refused."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

from clusterkit import PYTHON, ROOT, assert_no_traceback, cluster_document, write_cluster
from common import durable
from common.errors import UserError
from online.publish import exporter
from online.publish.delta_format import parse_delta_name
from online.publish.versions import ServingVersions

# Runs one publication in a process of its own. Every fsync is recorded (with the path its descriptor names) and
# still made; the rename of the file or folder named `crash_before` is not made: the process writes what it
# recorded and kills itself with SIGKILL there, between its flush and its rename, as a host crash would stop it.
CHILD = r"""
import json, os, shutil, signal, sys
from pathlib import Path

record, action, crash_before, *paths = sys.argv[1:]
paths, events, real_fsync = [Path(path) for path in paths], [], os.fsync


def fsync(descriptor):
    real_fsync(descriptor)
    events.append(["fsync", os.readlink(f"/proc/self/fd/{descriptor}")])


def killed_before(rename):
    def renamed(source, destination, *rest, **named):
        if os.path.basename(source) == crash_before:
            Path(record).write_text(json.dumps(events))
            os.kill(os.getpid(), signal.SIGKILL)
        rename(source, destination, *rest, **named)
        events.append(["rename", os.fspath(source), os.fspath(destination)])
    return renamed


os.fsync, os.rename, os.replace = fsync, killed_before(os.rename), killed_before(os.replace)
if action == "version":
    from online.publish.versions import ServingVersions
    versions = ServingVersions(paths[0], keep=3)
    number = versions.next_number()
    shutil.copytree(paths[1], versions.writing(number))
    versions.publish(number)
elif action == "delta":
    from online.publish.deltas import DeltaFiles
    deltas = DeltaFiles(paths[0])
    shutil.copytree(paths[1], deltas.writing(1, 2))
    deltas.publish(1, 2)
elif action == "summary":
    from cluster.run_files import write_json_atomically
    write_json_atomically(paths[0], {"status": "complete"}, durable=True)
elif action == "swap":
    from online.publish.exporter import _swap_in
    _swap_in(paths[0], paths[1])
Path(record).write_text(json.dumps(events))
"""


def publish_in_child(tmp_path: Path, action: str, *paths: Path, crash_before: str = "") -> tuple[int, list]:
    """(exit code, [["fsync", path] or ["rename", source, destination], ...]) of `action` in a child process."""
    record = tmp_path / "events.json"
    record.unlink(missing_ok=True)
    child = subprocess.run([PYTHON, "-c", CHILD, str(record), action, crash_before, *map(str, paths)], cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert record.exists(), child.stderr[-3000:]
    return child.returncode, json.loads(record.read_text())


def tree(folder: Path) -> list[Path]:
    return [folder, *folder.rglob("*")]


def assert_flushed(events: list, held: list[Path]) -> None:
    """Every file and folder of `held` (a tree()) was flushed, each folder after all it holds."""
    order = {path: index for index, (kind, path, *_) in enumerate(events) if kind == "fsync"}
    assert {str(path) for path in held} <= set(order), (held, events)
    for path in held[1:]:
        assert order[str(path)] < order[str(path.parent)], f"{path} flushed after its folder"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two small Keras models saved as best_model/ holds them (saved_model/, best.json), and what each predicts."""
    import tf_keras

    inputs = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    saved = {}
    for name, seed in (("old", 1), ("new", 2)):
        tf_keras.utils.set_random_seed(seed)
        model = tf_keras.Sequential([tf_keras.layers.Input((4,)), tf_keras.layers.Dense(2)])
        folder = tmp_path_factory.mktemp(name)
        model.save(folder / "saved_model", save_format="tf")
        (folder / "best.json").write_text(json.dumps({"checkpoint": f"ckpt-{seed}"}))
        saved[name] = (folder, model.predict(inputs, verbose=0))
    return inputs, saved


def assert_loads(saved_model: Path, inputs, expected) -> None:
    """The SavedModel at `saved_model` loads with tf_keras and with tf.saved_model, and predicts `expected`."""
    import tensorflow as tf
    import tf_keras

    np.testing.assert_allclose(tf_keras.models.load_model(saved_model).predict(inputs, verbose=0), expected,
                               rtol=1e-6)
    served = tf.saved_model.load(str(saved_model)).signatures["serving_default"]
    np.testing.assert_allclose(next(iter(served(tf.constant(inputs)).values())).numpy(), expected, rtol=1e-6)


def test_a_version_killed_between_its_flush_and_its_rename_leaves_the_previous_one_serving(tmp_path, models):
    inputs, saved = models
    serving = tmp_path / "serving"
    versions = ServingVersions(serving, keep=3)
    shutil.copytree(saved["old"][0] / "saved_model", versions.writing(1))
    versions.publish(1)
    code, events = publish_in_child(tmp_path, "version", serving, saved["new"][0] / "saved_model",
                                    crash_before=".writing-2")
    assert code == -signal.SIGKILL
    assert_flushed(events, tree(serving / ".writing-2"))  # so a host crash after the rename finds it whole
    assert ServingVersions(serving, keep=3).versions() == [1]  # reopened: the half is gone, never seen
    assert sorted(path.name for path in serving.iterdir()) == ["1"]
    assert_loads(serving / "1", inputs, saved["old"][1])


def test_a_delta_and_a_summary_killed_before_their_rename_leave_the_previous_whole(tmp_path, models):
    serving = tmp_path / "serving"
    (serving / "deltas" / "1.1").mkdir(parents=True)
    (serving / "deltas" / "1.1" / "manifest.json").write_text('{"sequence": 1}')
    code, events = publish_in_child(tmp_path, "delta", serving, models[1]["new"][0], crash_before=".writing-1.2")
    assert code == -signal.SIGKILL
    assert_flushed(events, tree(serving / "deltas" / ".writing-1.2"))
    listed = [parse_delta_name(path.name) for path in (serving / "deltas").iterdir()]
    assert [item for item in listed if item is not None] == [(1, 1)]  # what a follower finds: the previous delta
    assert (serving / "deltas" / "1.1" / "manifest.json").read_text() == '{"sequence": 1}'

    summary = tmp_path / "summary.json"
    summary.write_text('{"status": "running"}')
    code, events = publish_in_child(tmp_path, "summary", summary, crash_before="summary.json.partial")
    assert code == -signal.SIGKILL
    assert ["fsync", str(tmp_path / "summary.json.partial")] in events
    assert json.loads(summary.read_text()) == {"status": "running"}


@pytest.mark.parametrize("action", ["version", "summary"])
def test_the_folder_is_flushed_after_the_rename_that_publishes(tmp_path, models, action):
    """A rename is durable only once its folder is flushed: the last step, after the rename."""
    target = tmp_path / "serving" if action == "version" else tmp_path / "summary.json"
    code, events = publish_in_child(tmp_path, action, target, models[1]["new"][0] / "saved_model")
    assert code == 0
    renames = [index for index, event in enumerate(events) if event[0] == "rename"]
    assert renames and events[renames[-1] + 1:] == [["fsync", str(tmp_path / "serving" if action == "version"
                                                                   else tmp_path)]]


@pytest.mark.parametrize("crash_before", ["best_model", ".best_model.writing"],
                         ids=["before-the-first-rename", "between-the-renames"])
def test_best_model_killed_mid_swap_is_whole_after_the_evaluators_start(tmp_path, models, crash_before):
    """The evaluator's start-up clean-up (exporter.remove_leftovers) puts the old best_model back when the swap died
    between its renames; the new one, never recorded as the best, is written again when its checkpoint is
    evaluated again."""
    inputs, saved = models
    best, writing = tmp_path / "best_model", tmp_path / ".best_model.writing"
    shutil.copytree(saved["old"][0], best)
    shutil.copytree(saved["new"][0], writing)
    code, events = publish_in_child(tmp_path, "swap", writing, best, crash_before=crash_before)
    assert code == -signal.SIGKILL
    assert best.exists() == (crash_before == "best_model")
    written = tree(writing)
    exporter.remove_leftovers(best)  # what SidecarEvaluator.__init__ runs first
    assert sorted(path.name for path in tmp_path.iterdir() if "model" in path.name) == ["best_model"]
    assert json.loads((best / "best.json").read_text()) == {"checkpoint": "ckpt-1"}
    assert_loads(best / "saved_model", inputs, saved["old"][1])
    assert_flushed(events, written)  # before the old one was moved aside: a host crash after finds it whole


def test_mount_of_a_path_is_the_longest_mount_point_above_it():
    mounts = "\n".join([
        "/dev/vda / ext4 rw,relatime 0 0",
        "server:/export /mnt nfs4 rw 0 0",
        "bucket /mnt/a fuse.gcsfuse rw,nosuid 0 0",
        "my\\040bucket /mnt/with\\040space fuse.s3fs rw 0 0",
        "tmpfs /mnt/a tmpfs rw 0 0",  # mounted over the bucket later: it covers it
        "mountpoint-s3 /data/s3 fuse rw 0 0",
        "10.0.0.1@tcp:/lustre /scratch lustre rw 0 0"])
    assert durable.mount_of("/mnt/ab/x", mounts) == ("/mnt", "nfs4", "server:/export")
    assert durable.mount_of("/mnt/a/x", mounts) == ("/mnt/a", "tmpfs", "tmpfs")
    assert durable.mount_of("/mnt/with space/out", mounts) == ("/mnt/with space", "fuse.s3fs", "my bucket")
    assert durable.mount_of("/home/run", mounts) == ("/", "ext4", "/dev/vda")
    assert durable.mount_of("/home/run", "") == ("", "", "")
    stores = {path: durable.object_store(*durable.mount_of(path, mounts)[1:]) for path in (
        "/mnt/with space/out", "/data/s3/run", "/mnt/ab", "/scratch/run", "/")}
    assert stores == {"/mnt/with space/out": "s3fs", "/data/s3/run": "mountpoint-s3", "/mnt/ab": None,
                      "/scratch/run": None, "/": None}
    assert [durable.object_store(kind, "x") for kind in ("fuse.gcsfuse", "fuse.goofys", "fuse.rclone", "ceph",
                                                         "fuse.sshfs", "fuse.juicefs", "fuseblk")] == [
        "gcsfuse", "goofys", "rclone", None, None, None, None]


def test_output_dir_on_an_object_store_is_refused_in_one_line(tmp_path):
    fake = tmp_path / "mounts"
    fake.write_text(f"/dev/vda / ext4 rw 0 0\nruns {tmp_path / 'bucket'} fuse.gcsfuse rw 0 0\n")
    with pytest.raises(UserError) as refused:
        durable.refuse_object_store(str(tmp_path / "bucket" / "run"), "training.output_dir", fake)
    assert refused.value.lines() == [
        f"error: training.output_dir = '{tmp_path}/bucket/run': is on a gcsfuse mount ({tmp_path}/bucket, type "
        "fuse.gcsfuse) where rename is not atomic, so a reader could find half a serving version, delta or model; "
        "put output_dir on a local disk, NFS, Lustre or CephFS (docs/online-training.md)"]
    durable.refuse_object_store(str(tmp_path / "elsewhere"), "training.output_dir", fake)
    durable.refuse_object_store(str(tmp_path), "training.output_dir")  # this machine's own table: a local disk


def test_the_chief_refuses_an_object_store_output_dir_before_anything_else(tmp_path):
    """`coordinator.train` with the mount table read from a file that puts output_dir on gcsfuse: one line, exit 2,
    nothing written there."""
    output = tmp_path / "bucket" / "run"
    cluster = write_cluster(tmp_path, cluster_document(training={"output_dir": str(output)}))
    fake = tmp_path / "mounts"
    fake.write_text(f"/dev/vda / ext4 rw 0 0\nruns {tmp_path / 'bucket'} fuse.gcsfuse rw 0 0\n")
    chief = ("import sys; from pathlib import Path; from common import durable; durable.MOUNTS = Path(sys.argv[1]); "
             "from coordinator.train import train; train(cluster=sys.argv[2])")
    result = subprocess.run([PYTHON, "-c", chief, str(fake), str(cluster)], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result.stderr[-3000:]
    assert_no_traceback(result.stderr)
    assert [line for line in result.stderr.splitlines() if line.strip()] == [
        f"error: training.output_dir = '{output}': is on a gcsfuse mount ({tmp_path / 'bucket'}, type fuse.gcsfuse) "
        "where rename is not atomic, so a reader could find half a serving version, delta or model; put output_dir "
        "on a local disk, NFS, Lustre or CephFS (docs/online-training.md)"]
    assert not output.exists()



def test_the_launchers_preflight_names_an_object_store_output_dir_before_any_task_starts(tmp_path, monkeypatch):
    from cluster import config as cluster_config
    from launcher import host_checks

    output = tmp_path / "bucket" / "run"
    config = cluster_config.load(write_cluster(tmp_path, cluster_document(training={"output_dir": str(output)})))
    fake = tmp_path / "mounts"
    fake.write_text(f"/dev/vda / ext4 rw 0 0\nruns {tmp_path / 'bucket'} fuse.gcsfuse rw 0 0\n")
    monkeypatch.setattr(durable, "MOUNTS", fake)
    problems = host_checks.preflight(config, [config.lead])
    assert [line for line in problems if "gcsfuse" in line] == [
        f"chief:0: training.output_dir = '{output}': is on a gcsfuse mount ({tmp_path / 'bucket'}, type fuse.gcsfuse) "
        "where rename is not atomic, so a reader could find half a serving version, delta or model; put output_dir "
        "on a local disk, NFS, Lustre or CephFS (docs/online-training.md)"]
