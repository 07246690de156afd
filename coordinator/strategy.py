"""The distribution strategies: ParameterServerStrategy once every ps and worker answers, and the synchronous ones."""

from __future__ import annotations

import sys

import tensorflow as tf

from cluster.config import ClusterConfig
from cluster.recommender_options import RECOMMENDER_MODELS
from cluster.strategies import StrategyName
from cluster.training_options import TrainingOptions
from common import fresh_ps, net
from common.errors import CLUSTER_UNAVAILABLE_EXIT_CODE
from coordinator import frozen_workers
from coordinator.closure_scope import closures_end_without_waiting_on_other_workers
from tables.placement import BalancedPartitioner

CHIEF_CPU = "/job:chief/replica:0/task:0/device:CPU:0"


def wait_for_cluster(config: ClusterConfig, timeout_s: float, log) -> ClusterConfig:
    """The config to train with: exits with code 3 naming each silent task, since TensorFlow itself would hang on a
    missing ps or worker, and leaves out workers that listen but answer nothing (coordinator/frozen_workers.py).
    Under Kubernetes with an output volume, first waits until every ps serves this chief alone (common/fresh_ps.py)."""
    if fresh_ps.applies(config):
        fresh_ps.start_generation(config, timeout_s, log)
    tasks = config.training_tasks(("ps", "worker"))
    log.info("waiting up to %.0f s for %s", timeout_s, ", ".join(f"{t.name}@{t.address}" for t in tasks))
    silent = net.wait_until_listening(tasks, timeout_s)
    if silent:
        for task in silent:
            print(f"error: {task.name} at {task.address} did not answer within {timeout_s:.0f} s; start it "
                  "(sh run.sh starts every task) or fix its address in cluster.json", file=sys.stderr)
        sys.exit(CLUSTER_UNAVAILABLE_EXIT_CODE)
    return frozen_workers.start_without_frozen(config, timeout_s, log)


def build(config: ClusterConfig, options: TrainingOptions) -> tf.distribute.experimental.ParameterServerStrategy:
    """The strategy, with variables above `min_shard_bytes` split over up to `max_shards` (default: every ps);
    a recommender's tables split evenly over every ps instead (BalancedPartitioner: the same bytes on each).
    A worker frozen while its values are freed holds no other worker's closures (coordinator/closure_scope.py)."""
    closures_end_without_waiting_on_other_workers()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    return tf.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=partitioner_for(options, len(config.jobs["ps"])))


def partitioner_for(options: TrainingOptions, num_ps: int):
    """MinSizePartitioner over up to `max_shards` (default: every ps); a recommender's BalancedPartitioner."""
    if options.model in RECOMMENDER_MODELS:
        return BalancedPartitioner(num_ps, min_shard_bytes=options.min_shard_bytes)
    return tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=options.min_shard_bytes, max_shards=options.max_shards or num_ps)


def build_synchronous(options: TrainingOptions) -> tf.distribute.Strategy:
    """multi_worker_mirrored (from TF_CONFIG), mirrored (every visible GPU, else the CPU) or one_device.

    Call it before any other TensorFlow op: multi_worker_mirrored configures collectives at program start.
    """
    if options.strategy == StrategyName.MULTI_WORKER_MIRRORED:
        implementation = getattr(tf.distribute.experimental.CommunicationImplementation, options.collective.upper())
        return tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(implementation=implementation))
    if options.strategy == StrategyName.MIRRORED:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.OneDeviceStrategy("/gpu:0" if tf.config.list_physical_devices("GPU") else "/cpu:0")


def worker_index(distribution: tf.distribute.Strategy) -> int:
    """This process's worker index under multi_worker_mirrored; 0 for a single-process strategy."""
    resolver = getattr(distribution, "cluster_resolver", None)
    return int(resolver.task_id or 0) if resolver and resolver.task_type == "worker" else 0
