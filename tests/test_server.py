"""Real ps and worker servers from a generated cluster.json serve a ParameterServerStrategy fit and stop cleanly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess

import pytest

from clusterkit import ROOT, assert_no_traceback, cluster_document, run_python, write_cluster
from cluster import config as cluster_config
from cluster import taskspec
from common import net

pytestmark = pytest.mark.cluster

TINY_FIT = """
import tensorflow as tf, tf_keras
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
strategy = tf.distribute.experimental.ParameterServerStrategy(
    resolver, variable_partitioner=tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=1024, max_shards=2))
def dataset_fn(context):
    x = tf.random.uniform((256, 8)); y = tf.reduce_sum(x, axis=1, keepdims=True)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(
        context.get_per_replica_batch_size(32))
with strategy.scope():
    model = tf_keras.Sequential([tf_keras.layers.Dense(64, input_shape=(8,)), tf_keras.layers.Dense(1)])
    model.compile("adam", "mse", steps_per_execution=2)
model.fit(tf_keras.utils.experimental.DatasetCreator(dataset_fn), epochs=2, steps_per_epoch=6, verbose=0)
print("ITERATIONS", int(model.optimizer.iterations.numpy()))
print("SHARDS", len(model.layers[0].kernel.variables))
"""


def start_server(config, task, log_dir):
    log = open(log_dir / f"{task.job}-{task.index}.log", "wb")
    return subprocess.Popen(taskspec.task_command(config, task), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            env=taskspec.task_environment(config, task, os.environ), start_new_session=True)


@pytest.fixture
def servers(tmp_path):
    config = cluster_config.load(write_cluster(tmp_path, cluster_document(evaluator=False)))
    tasks = config.tasks(("ps", "worker"))
    children = {task: start_server(config, task, tmp_path) for task in tasks}
    try:
        assert net.wait_until_listening(tasks, timeout_s=60) == [], "servers did not come up"
        yield config, children
    finally:
        for child in children.values():
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()


def test_servers_train_a_tiny_model_and_stop_on_sigterm(servers, tmp_path):
    config, children = servers
    chief = config.task("chief", 0)
    env = {**taskspec.task_variables(config, chief), "PYTHONPATH": str(ROOT)}
    fit = run_python("-c", TINY_FIT, env_changes=env, cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr[-3000:]
    iterations = int(fit.stdout.split("ITERATIONS")[1].split()[0])
    assert 12 <= iterations <= 12 + 2  # at-least-once closures may add up to steps_per_execution
    assert "SHARDS 2" in fit.stdout  # the 8x64 kernel was split over both ps

    for child in children.values():
        child.send_signal(signal.SIGTERM)
    codes = {task.name: child.wait(timeout=15) for task, child in children.items()}
    assert codes == {task.name: 0 for task in children}
    assert not [t for t in children if net.answers(t.address.host, t.address.port)]
    assert "ready: ps listening" in (tmp_path / "ps-0.log").read_text()
    assert "stopping on SIGTERM" in (tmp_path / "ps-0.log").read_text()


def test_busy_port_is_one_clear_line(tmp_path):
    config = cluster_config.load(write_cluster(tmp_path, cluster_document(evaluator=False)))
    task = config.task("ps", 0)
    with socket.create_server(("", task.address.port)):  # taken on every interface, as by a TensorFlow server
        result = subprocess.run(taskspec.task_command(config, task), cwd=ROOT, capture_output=True, text=True,
                                timeout=60, env=taskspec.task_environment(config, task, os.environ))
    assert result.returncode == 2
    assert_no_traceback(result.stderr)
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: port = {task.address.port}: is already in use")
