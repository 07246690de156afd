"""A systematic sweep: every field of the shipped cluster.json (with every default spelled out) given each kind of
wrong value must either validate into something every task can be given, or fail with UserError lines only."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from clusterkit import ROOT, assert_no_traceback, run_module, write_cluster
from cluster.training_options import TrainingOptions
from cluster.evaluation_options import EvaluationOptions
from cluster import config as cluster_config
from cluster import taskspec
from common.errors import UserError

WRONG_VALUES = ["text", "", "2222", "é", "名前", "a\nb", 1.5, True, False, None, [], ["x"], [1], {}, {"a": 1},
                -1, 0, 1, 2**31, 2**63, 10**30, 1e308, float("inf"), float("nan"), "localhost:2222", "[::1]:2222",
                "::1", "run.sh", "~nobody_here/x"]
EXTRA_KEYS = ["unknown", "", "é", "a\nb", "$schema"]


def full_document() -> dict:
    """The shipped cluster.json with every setting present, so each one gets swept."""
    document = json.loads((ROOT / "cluster.json").read_text())
    as_json = lambda instance: json.loads(json.dumps(dataclasses.asdict(instance)))  # noqa: E731
    document["training"] = {**as_json(TrainingOptions()), **document["training"]}
    document["evaluation"] = as_json(EvaluationOptions())
    document["launcher"] = {**as_json(cluster_config.LauncherSettings()), **document["launcher"]}
    document["hosts"]["localhost"] = as_json(cluster_config.HostSettings())
    document["security"]["firewall"] = False
    return document


def paths(node, prefix=()):
    """Every key path and list index in the document, outermost first."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        yield (*prefix, key)
        yield from paths(child, (*prefix, key))


def replaced(document: dict, path: tuple, value) -> dict:
    changed = copy.deepcopy(document)
    node = changed
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return changed


def mutations():
    document = full_document()
    for path in paths(document):
        for value in WRONG_VALUES:
            yield path, value, replaced(document, path, value)
    for path in [(), *(p for p in paths(document) if isinstance(replaced(document, p, None), dict))]:
        node = document
        for key in path:
            node = node[key]
        if isinstance(node, dict):
            for key in EXTRA_KEYS:
                yield (*path, key), "extra key", replaced(document, (*path, key), 1) if path else {**document, key: 1}


def assert_usable(config: cluster_config.ClusterConfig) -> None:
    """What the launcher derives for every task from an accepted file must build."""
    for task in config.launched_tasks():
        json.dumps(taskspec.tf_config(config, task))
        assert all(isinstance(part, str) for part in taskspec.task_command(config, task))
        taskspec.task_variables(config, task)


def test_every_mutation_validates_or_is_user_error_lines(tmp_path):
    failures, rejected, accepted = [], 0, 0
    for path, value, document in mutations():
        try:
            config = cluster_config.parse(document, tmp_path / "cluster.json")
            assert_usable(config)
            accepted += 1
        except UserError as error:
            rejected += 1
            bad = [line for line in error.lines() if "\n" in line or not line.startswith("error: ")]
            if bad:
                failures.append(f"{path} = {value!r}: malformed lines {bad}")
        except Exception as error:  # anything else would be a traceback for the user
            failures.append(f"{path} = {value!r}: {type(error).__name__}: {error}")
    assert not failures, "\n".join(failures[:30])
    assert rejected > 1000 and accepted > 50


# A handful through the command line: exit 2, only `[launcher] error:` lines, nothing on stdout.
CLI_MUTATIONS = [
    (("training", "seed"), -1),
    (("training", "epochs"), 1e308),
    (("cluster",), ["localhost:2222"]),
    (("hosts", "localhost", "gpus"), [0, "1", None]),
    (("launcher",), "logs"),
    (("training", "metrics"), ["accuracy", "accuracy"]),
    (("cluster", "ps", 0), "[fe80::1%eth0]:2222"),
    (("security", "firewall"), "yes"),
]


@pytest.mark.parametrize("path,value", CLI_MUTATIONS, ids=[f"{'.'.join(map(str, p))}={v!r}" for p, v in CLI_MUTATIONS])
def test_cli_gives_only_error_lines(tmp_path, path, value):
    cluster = write_cluster(tmp_path, replaced(full_document(), path, value))
    result = run_module("roles.launch", "print_config", str(cluster))
    assert result.returncode == 2, result.stderr
    assert_no_traceback(result.stderr)
    assert result.stdout == ""
    assert all(line.startswith(f"[launcher] error: {cluster}: ") for line in result.stderr.splitlines())
