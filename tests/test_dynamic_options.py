"""Dynamic tables' and synthetic drift's options: each mistake is one line naming field, value and fix (exit 2)."""

from __future__ import annotations

import copy
import json

import pytest

from clusterkit import assert_no_traceback, run_module, write_cluster
from cluster import config as cluster_config
from common.errors import UserError

CLICKS = {"model": "dlrm", "dataset": "synthetic_criteo"}
BASE = {"cluster": {"chief": ["localhost:3000"], "worker": ["localhost:3001"],
                    "ps": ["localhost:3003", "localhost:3004"]},
        "training": {**CLICKS, "embedding_kind": "dynamic"}}

CASES = [
    ("unknown kind", {"embedding_kind": "dense"},
     "training.embedding_kind = 'dense': unknown kind of embedding table; use hashed"),
    ("no capacity", {"embedding_capacity": 0}, "training.embedding_capacity = 0: must be an integer from 1"),
    ("capacity below the ps count", {"embedding_capacity": 1},
     "training.embedding_capacity = 1: is smaller than the number of ps (2)"),
    ("admit at the zeroth sighting", {"admit_after": 0}, "training.admit_after = 0: must be an integer from 1"),
    ("negative expiry", {"expire_after_steps": -1}, "training.expire_after_steps = -1: must be 0 (never)"),
    ("negative expiry in seconds", {"expire_after_s": -1}, "training.expire_after_s = -1: must be 0 (never)"),
    ("expiry in steps and in seconds", {"expire_after_steps": 100, "expire_after_s": 60},
     "training.expire_after_s = 60: is given with expire_after_steps (100): a row expires by steps or by seconds"),
    ("expiry in seconds for hashed tables", {"embedding_kind": "hashed", "expire_after_s": 60},
     "training.expire_after_s = 60: applies only to dynamic tables"),
    ("an admission window without admission", {"admit_window_steps": 50},
     "training.admit_window_steps = 50: counts sightings for admit_after above 1, and admit_after is 1"),
    ("an empty admission window", {"admit_after": 2, "admit_window_steps": 0},
     "training.admit_window_steps = 0: must be an integer from 1"),
    ("a model without tables", {"model": "cnn", "dataset": "digits", "loss": "sparse_categorical_crossentropy"},
     "training.embedding_kind = 'dynamic': needs a model with embedding tables, not cnn"),
    ("a mirrored strategy", {"strategy": "multi_worker_mirrored"},
     "training.embedding_kind = 'dynamic': keeps one index per table, which multi_worker_mirrored would copy"),
    ("admission for hashed tables", {"embedding_kind": "hashed", "admit_after": 2},
     "training.admit_after = 2: applies only to dynamic tables"),
    ("expiry for hashed tables", {"embedding_kind": "hashed", "expire_after_steps": 100},
     "training.expire_after_steps = 100: applies only to dynamic tables"),
    ("drift of other data", {"model": "cnn", "dataset": "digits", "embedding_kind": "hashed",
                             "loss": "sparse_categorical_crossentropy", "synthetic_new_ids": 10},
     "training.synthetic_new_ids = 10: makes ids born and dying in synthetic_criteo data, not in digits"),
    ("ids that never live", {"synthetic_id_lifetime": 0}, "training.synthetic_id_lifetime = 0"),
]


@pytest.mark.parametrize("case_id, training, expected", CASES, ids=[case[0] for case in CASES])
def test_each_mistake_is_one_line(tmp_path, case_id, training, expected):
    document = copy.deepcopy(BASE)
    document["training"].update(training)
    with pytest.raises(UserError) as raised:
        cluster_config.parse(document, tmp_path / "c.json")
    lines = raised.value.lines()
    assert len(lines) == 1 and expected in lines[0], lines


def test_dynamic_tables_with_drift_are_accepted_and_a_mistake_exits_2(tmp_path):
    document = copy.deepcopy(BASE)
    document["training"].update({"embedding_capacity": 1000, "admit_after": 2, "expire_after_steps": 500,
                                 "synthetic_new_ids": 100, "synthetic_id_lifetime": 4})
    training = cluster_config.parse(document, tmp_path / "c.json").training
    assert (training.embedding_kind, training.embedding_capacity, training.admit_after) == ("dynamic", 1000, 2)
    document["training"]["embedding_capacity"] = 1
    result = run_module("roles.launch", "print_config", str(write_cluster(tmp_path, document)))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert_no_traceback(result.stderr)


def test_a_run_with_hashed_tables_does_not_resume_as_dynamic(tmp_path):
    from cluster.same_run import differences

    dynamic = cluster_config.parse(copy.deepcopy(BASE), tmp_path / "c.json").training
    assert differences({"embedding_kind": "hashed"}, dynamic) == ["embedding_kind: 'hashed' → 'dynamic'"]
    assert differences({"embedding_kind": "dynamic", "embedding_capacity": 5}, dynamic) == []  # capacity may change


def test_a_run_resumed_with_another_table_optimizer_is_refused_before_it_starts(tmp_path):
    from cluster.run_files import RunFiles
    from launcher.previous_run import different_run

    document = copy.deepcopy(BASE)
    document["training"].update({"embedding_optimizer": "sgd", "output_dir": str(tmp_path / "out")})
    config = cluster_config.parse(document, tmp_path / "c.json")
    files = RunFiles(tmp_path / "out")
    files.output.mkdir(parents=True)
    previous = {**config.training.__dict__, "embedding_optimizer": "adagrad"}
    files.summary.write_text(json.dumps({"status": "running", "epochs": 1, "options": previous, "workers": 1},
                                        default=list))
    line = different_run(config)
    assert line and "holds a different run (embedding_optimizer: 'adagrad' → 'sgd')" in line, line
