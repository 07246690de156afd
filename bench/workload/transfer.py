"""What one step of the reference workload must pay in transfers: ps <-> worker bandwidth on loopback.

The chief places a variable of the tutorial CNN's size (2.77 M float32, 11.1 MB) on the ps and runs two
functions on the worker, `--calls` times each: one reads the whole variable (ps -> worker, as the forward
pass does) and reduces it to a scalar; one sends a worker-made tensor of the same size into the variable with
assign_add (worker -> ps, as a gradient does). Only scalars come back to the chief.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.kit.cluster import PYTHON, ROOT, LoopbackCluster
from cluster import config as cluster_config
from cluster import taskspec

PROBE = """
import json, sys, time, tensorflow as tf
parameters, calls = int(sys.argv[1]), int(sys.argv[2])
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
filters = tf.config.experimental.ClusterDeviceFilters()  # as ParameterServerStrategy connects (else it hangs)
filters.set_device_filters("worker", 0, ["/job:ps", "/job:chief"])
filters.set_device_filters("ps", 0, ["/job:worker", "/job:chief"])
tf.config.experimental_connect_to_cluster(resolver, job_name="chief", cluster_device_filters=filters)
with tf.device("/job:ps/task:0/device:CPU:0"):
    variable = tf.Variable(tf.zeros([parameters]))

@tf.function
def read():
    with tf.device("/job:worker/task:0/device:CPU:0"):
        return tf.reduce_sum(tf.identity(variable))

@tf.function
def write():
    with tf.device("/job:worker/task:0/device:CPU:0"):
        update = tf.fill([parameters], 1e-6)
    variable.assign_add(update)
    return tf.constant(0.0)

result = {}
for name, function in (("ps_to_worker", read), ("worker_to_ps", write)):
    function().numpy()  # trace and warm up
    started = time.perf_counter()
    for _ in range(calls):
        function().numpy()
    seconds = (time.perf_counter() - started) / calls
    result[name] = {"ms_per_call": seconds * 1e3, "mb_per_s": parameters * 4 / seconds / 1e6}
print("TRANSFER " + json.dumps(result), flush=True)
"""


def measure(parameters: int = 2_770_762, calls: int = 50) -> dict:
    """Milliseconds per transfer and MB/s in each direction, for a variable of `parameters` float32."""
    with tempfile.TemporaryDirectory() as scratch, LoopbackCluster(Path(scratch)) as cluster:
        config = cluster_config.load(cluster.path)
        env = taskspec.task_environment(config, config.task("chief", 0), os.environ)
        result = subprocess.run([PYTHON, "-c", PROBE, str(parameters), str(calls)], capture_output=True, text=True,
                                env=env, cwd=ROOT, timeout=600)
    lines = [line for line in result.stdout.splitlines() if line.startswith("TRANSFER ")]
    if not lines:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(lines[0].removeprefix("TRANSFER "))


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2), file=sys.stdout)
