"""`sh run.sh reload` under Slurm without Slurm: new job sizes placed on the running allocation's nodes, tasks that
stay kept where they run, and what cannot fit refused in one line before anything changes."""

from __future__ import annotations

import json

import pytest

from cluster import config as cluster_config
from cluster import job_sizes
from cluster.strategies import StrategyName, strategy_named
from clusterkit import write_cluster
from common.errors import UserError
from launcher import reload
from launcher.backends.slurm import resize
from launcher.backends.slurm.allocation import Allocation, allocation_path, placed, resolved_path

PS = strategy_named(StrategyName.PARAMETER_SERVER)
RUNNING = {"chief": ["n1:2220"], "worker": ["n2:2221", "n3:2222"], "ps": ["n2:2223"], "evaluator": ["n1:2224"]}


def test_tasks_that_stay_keep_their_node_and_port_and_new_ones_go_to_the_least_busy_node():
    grown = job_sizes.resize(RUNNING, {"chief": 1, "worker": 3, "ps": 2, "evaluator": 1}, ["n1", "n2", "n3"], PS)
    assert grown == {"chief": ["n1:2220"], "worker": ["n2:2221", "n3:2222", "n3:2225"],
                     "ps": ["n2:2223", "n2:2226"], "evaluator": ["n1:2224"]}


def test_a_job_that_shrinks_loses_its_last_tasks():
    shrunk = job_sizes.resize(RUNNING, {"chief": 1, "worker": 1, "ps": 1}, ["n1", "n2", "n3"], PS)
    assert shrunk == {"chief": ["n1:2220"], "worker": ["n2:2221"], "ps": ["n2:2223"]}


def write(tmp_path, name: str, cluster, **slurm) -> cluster_config.ClusterConfig:
    document = {"cluster": cluster, "launcher": {"backend": "slurm", "logs_dir": str(tmp_path / "logs")},
                "slurm": {"nodes": 3, **slurm}, "training": {"output_dir": str(tmp_path / "output")}}
    return cluster_config.load(write_cluster(tmp_path, document, name))


def running_job(tmp_path, **slurm) -> cluster_config.ClusterConfig:
    """The launcher's view after start: cluster.json with sizes placed on the job's three nodes."""
    sized = write(tmp_path, "cluster.json", {"chief": 1, "worker": 2, "ps": 1}, **slurm)
    allocation = Allocation("7", ("n1", "n2", "n3"), True, workers_per_node=1)
    allocation.write(allocation_path(sized))
    return placed(sized, allocation)


def test_an_accepted_reload_becomes_the_placed_cluster_file_the_steps_read(tmp_path):
    running = running_job(tmp_path)
    candidate = resize.on_allocation(running, write(tmp_path, "edited.json", {"chief": 1, "worker": 3, "ps": 2}))
    assert reload.refusals(running, candidate) == []
    assert json.loads(resolved_path(running).read_text())["cluster"]["worker"] == ["n2:22221", "n3:22222"]
    adopted = resize.adopt(candidate)
    assert adopted.source == resolved_path(running) and not resize.candidate_path(running).exists()
    assert [str(a) for a in adopted.jobs["worker"]] == ["n2:22221", "n3:22222", "n3:22224"]
    assert [str(a) for a in adopted.jobs["ps"]] == ["n2:22223", "n2:22225"]


def test_a_changed_slurm_setting_is_refused_and_the_placed_file_stays(tmp_path):
    running = running_job(tmp_path)
    before = resolved_path(running).read_text()
    candidate = resize.on_allocation(running, write(tmp_path, "e.json", {"chief": 1, "worker": 1, "ps": 1},
                                                    cpus_per_task=2))
    assert [p.field for p in reload.refusals(running, candidate)] == ["slurm.cpus_per_task"]
    resize.discard(running)
    assert resolved_path(running).read_text() == before and not resize.candidate_path(running).exists()


def test_more_workers_on_a_node_than_its_gpus_were_held_for_is_refused(tmp_path):
    running = running_job(tmp_path, gpus_per_worker=1)
    edited = write(tmp_path, "e.json", {"chief": 1, "worker": 3, "ps": 1}, gpus_per_worker=1)
    with pytest.raises(UserError) as error:
        resize.on_allocation(running, edited)
    [problem] = error.value.problems
    assert (problem.field, problem.value) == ("cluster.worker", 3)
    assert problem.problem.startswith("puts more than 1 worker(s) on n3, whose GPUs the job holds only for that many")


def test_named_nodes_outside_the_allocation_are_refused(tmp_path):
    running = running_job(tmp_path)
    edited = write(tmp_path, "e.json", {"chief": ["n1:22220"], "worker": ["n9:22221"], "ps": ["n2:22223"]})
    with pytest.raises(UserError) as error:
        resize.on_allocation(running, edited)
    assert "cluster.worker = 'n9': not a node of the running job 7 (it holds n1, n2, n3)" in error.value.lines()[0]
