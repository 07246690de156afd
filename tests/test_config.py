"""cluster.json validation: every mistake gives one line naming field, value and fix, exit 2, no traceback."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from clusterkit import ROOT, assert_no_traceback, cluster_document, run_module, write_cluster
from cluster import config as cluster_config
from cluster import taskspec
from cluster.training_options import TrainingOptions
from cluster.evaluation_options import EvaluationOptions

BASE = {
    "cluster": {"chief": ["localhost:3000"], "worker": ["localhost:3001", "localhost:3002"],
                "ps": ["localhost:3003", "localhost:3004"], "evaluator": ["localhost:3005"]},
}


def mutated(change) -> dict:
    document = copy.deepcopy(BASE)
    change(document)
    return document


def set_path(*keys, value):
    def change(document):
        node = document
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return change


# (case id, change to BASE, text the single error line must hold)
CASES = [
    ("unknown top-level key", set_path("clustre", value={}), "clustre = {}: unknown top-level key"),
    ("unknown job", set_path("cluster", "master", value=["localhost:3010"]), "cluster.master"),
    ("no chief", set_path("cluster", "chief", value=[]), "needs exactly one chief"),
    ("two chiefs", set_path("cluster", "chief", value=["localhost:3010", "localhost:3011"]),
     "needs exactly one chief"),
    ("no ps", lambda d: d["cluster"].pop("ps"), "needs at least one ps"),
    ("no worker", set_path("cluster", "worker", value=[]), "needs at least one worker"),
    ("two evaluators", set_path("cluster", "evaluator", value=["localhost:3010", "localhost:3011"]),
     "at most one evaluator"),
    ("not host:port", set_path("cluster", "ps", value=["localhost"]), "'localhost': is not host:port"),
    ("job not a list", set_path("cluster", "ps", value="localhost:3003"), "must be a list"),
    ("port not a number", set_path("cluster", "ps", value=["localhost:http"]), "port must be an integer in 1-65535"),
    ("port zero", set_path("cluster", "ps", value=["localhost:0"]), "port must be an integer in 1-65535"),
    ("port too large", set_path("cluster", "ps", value=["localhost:70000"]), "port must be an integer in 1-65535"),
    ("same address twice", set_path("cluster", "ps", value=["localhost:3001"]), "is also used by cluster.worker[0]"),
    ("loopback aliases collide", set_path("cluster", "ps", value=["127.0.0.1:3001"]), "is also used by"),
    ("shell text in host", set_path("cluster", "ps", value=["a;reboot:3003"]), "characters that are not allowed"),
    ("command substitution in host", set_path("cluster", "ps", value=["$(id):3003"]), "not allowed"),
    ("public address", set_path("cluster", "ps", value=["8.8.8.8:3003"]), "is a public address"),
    ("bad allow flag", set_path("security", "allow_public_addresses", value="yes"), "must be true or false"),
    ("shell text in user", set_path("hosts", "localhost", "ssh_user", value="bob;ls"), "hosts.localhost.ssh_user"),
    ("space in workdir", set_path("hosts", "localhost", "workdir", value="/tmp/my dir"), "paths may hold only"),
    ("substitution in python", set_path("hosts", "localhost", "python", value="$(curl x)"), "paths may hold only"),
    ("ssh port", set_path("hosts", "localhost", "ssh_port", value=0), "hosts.localhost.ssh_port = 0"),
    ("unknown host setting", set_path("hosts", "localhost", "passwd", value="x"), "unknown setting"),
    ("negative gpu", set_path("hosts", "localhost", "gpus", value=[-1]), "non-negative GPU ids"),
    ("gpu as string", set_path("hosts", "localhost", "gpus", value=["0"]), "non-negative GPU ids"),
    ("gpu as bool", set_path("hosts", "localhost", "gpus", value=[True]), "non-negative GPU ids"),
    ("tf_package with shell text", set_path("hosts", "localhost", "tf_package", value="tensorflow==2.21.0; rm -rf /"),
     "must be a pinned TensorFlow wheel"),
    ("fewer gpus than workers", set_path("hosts", "localhost", "gpus", value=[0]), "fewer GPUs than the 2 workers"),
    ("unknown training option", set_path("training", "epoch", value=3), "training.epoch = 3: unknown setting"),
    ("unknown model", set_path("training", "model", value="vgg"), "training.model = 'vgg': unknown model"),
    ("zero epochs", set_path("training", "epochs", value=0),
     "training.epochs = 0: must be an integer from 1 to 2147483647"),
    ("negative batch", set_path("training", "per_worker_batch", value=-8), "training.per_worker_batch = -8"),
    ("one checkpoint kept", set_path("training", "keep_checkpoints", value=1), "keep at least 2"),
    ("launcher setting", set_path("launcher", "ready_timeout_s", value=-1), "launcher.ready_timeout_s = -1"),
    ("negative seed", set_path("training", "seed", value=-1), "training.seed = -1: must be an integer from 0 to"),
    ("seed past numpy's range", set_path("training", "seed", value=2**32), "training.seed = 4294967296"),
    ("batch past int32", set_path("training", "per_worker_batch", value=2**40), "training.per_worker_batch"),
    ("endless timeout", set_path("launcher", "stall_timeout_s", value=1e300), "at most 10000000"),
    ("unknown loss", set_path("training", "loss", value="crossentropy"), "training.loss = 'crossentropy': unknown"),
    ("regression loss on class labels", set_path("training", "loss", value="mse"), "unknown loss for class labels"),
    ("unknown metric", set_path("training", "metrics", value=["acuracy"]), "training.metrics = ['acuracy']"),
    ("metric for the other labels", lambda d: d.update(training={"loss": "categorical_crossentropy",
                                                                 "metrics": ["sparse_categorical_accuracy"]}),
     "does not work with the one-hot labels"),
    ("best metric not trained", set_path("training", "metrics", value=["acc"]),
     "evaluation.best_metric = 'val_accuracy': is not among the validation metrics of this training "
     "(training.metrics = ['acc']); use one of val_loss, val_acc"),
    ("best metric typo", set_path("evaluation", "best_metric", value="val_acc"), "use one of val_loss, val_accuracy"),
    ("val_loss maximised", set_path("evaluation", "best_metric", value="val_loss"),
     "evaluation.best_mode = 'max': would keep the worst checkpoint by val_loss"),
    ("hosts entry for no task", set_path("hosts", "locahost", "gpus", value=[0]),
     "hosts.locahost = 'locahost': matches no host in cluster, so its settings would be ignored; use the host "
     "exactly as written in cluster: localhost"),
    ("repeated gpu id", set_path("hosts", "localhost", "gpus", value=[0, 0, 1]), "lists GPU 0 twice"),
    ("::1 is localhost", set_path("cluster", "ps", value=["[::1]:3001"]), "is also used by cluster.worker[0]"),
    ("0.0.0.0 is this machine", set_path("cluster", "ps", value=["0.0.0.0:3001"]), "is also used by"),
    ("host names ignore case", set_path("cluster", "ps", value=["LocalHost:3001"]), "is also used by"),
    ("ipv6 without brackets", set_path("cluster", "ps", value=["::1:3003"]), "an IPv6 address goes in brackets"),
    ("evaluator away from the chief", lambda d: d["cluster"].update(chief=["10.0.0.4:3000"],
                                                                     evaluator=["10.0.0.5:3005"]),
     "cluster.evaluator[0] = '10.0.0.5:3005': runs on another host than the chief (10.0.0.4:3000)"),
    ("evaluator away from worker 0", lambda d: d.update(training={"strategy": "multi_worker_mirrored"},
                                                        cluster={"worker": ["10.0.0.4:3001"],
                                                                 "evaluator": ["10.0.0.5:3005"]}),
     "runs on another host than worker 0"),
    ("logs inside output", lambda d: d.update(training={"output_dir": "out"}, launcher={"logs_dir": "out"}),
     "launcher.logs_dir = 'out': is training.output_dir (out) too"),
    ("output_dir is a file", set_path("training", "output_dir", value="cluster.json"), "is a file, not a directory"),
    ("logs_dir under a file", set_path("launcher", "logs_dir", value="run.sh/logs"), "run.sh is a file"),
    ("output_dir of an unknown user", set_path("training", "output_dir", value="~nobody_here/out"),
     "is not a usable path"),
    ("flat synthetic input not square", lambda d: d.update(training={"dataset": "synthetic",
                                                                     "synthetic_shape": [10]}),
     "this size is not a square"),
    ("image smaller than cnn's kernel", lambda d: d.update(training={"dataset": "synthetic",
                                                                     "synthetic_shape": [2, 2, 1]}),
     "needs images of at least 3x3"),
    ("newline in a key", set_path("training", "epo\nchs", value=1), "training.epo\\nchs = 1: unknown setting"),
    ("held-out fraction past 1", set_path("training", "criteo_validation", value=1.5),
     "training.criteo_validation = 1.5: must be null, a fraction between 0 and 1, or a list of distinct day numbers"),
    ("held-out day twice", set_path("training", "criteo_validation", value=[23, 23]),
     "training.criteo_validation = [23, 23]: must be null"),
    ("held-out day as text", set_path("training", "criteo_validation", value="day_23"), "use null for the published"),
    ("no held-out days", set_path("training", "criteo_validation", value=[]), "training.criteo_validation = []"),
    ("validation fraction of 0", set_path("training", "validation_fraction", value=0),
     "training.validation_fraction = 0: must be a fraction between 0 and 1 (both excluded); use e.g. 0.1"),
    ("validation fraction of all", set_path("training", "validation_fraction", value=1),
     "training.validation_fraction = 1"),
]


@pytest.mark.parametrize("case_id,change,expected", CASES, ids=[c[0] for c in CASES])
def test_each_mistake_is_one_clear_line_and_exit_2(tmp_path, case_id, change, expected):
    path = write_cluster(tmp_path, mutated(change))
    result = run_module("roles.launch", "print_config", str(path))
    assert result.returncode == 2, result.stderr
    assert_no_traceback(result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert expected in lines[0]
    assert lines[0].startswith(f"[launcher] error: {path}: ")


def test_all_problems_reported_together(tmp_path):
    document = mutated(set_path("cluster", "ps", value=["localhost:0"]))
    document["training"] = {"epochs": 0}
    with pytest.raises(cluster_config.UserError) as raised:
        cluster_config.parse(document, tmp_path / "c.json")
    assert [line.split(": ")[2].split(" =")[0] for line in raised.value.lines()] == [
        "cluster.ps[0]", "training.epochs"]


def test_public_address_allowed_on_purpose(tmp_path):
    document = mutated(set_path("cluster", "ps", value=["8.8.8.8:3003"]))
    document["security"] = {"allow_public_addresses": True}
    config = cluster_config.parse(document, tmp_path / "c.json")
    assert str(config.task("ps", 0).address) == "8.8.8.8:3003"


def test_cli_exit_code_and_no_traceback(tmp_path):
    path = write_cluster(tmp_path, mutated(set_path("cluster", "ps", value=["localhost:99999"])))
    result = run_module("roles.launch", "print_config", str(path))
    assert result.returncode == 2
    assert_no_traceback(result.stderr)
    assert result.stderr.strip().splitlines() == [
        f"[launcher] error: {path}: cluster.ps[0] = 'localhost:99999': port must be an integer in 1-65535; "
        "pick a free port, e.g. 2222"]


def test_bad_json_names_line_and_column(tmp_path):
    path = tmp_path / "cluster.json"
    path.write_text('{\n  "cluster": {\n    "chief": ["localhost:1"],\n  }\n}\n')
    result = run_module("roles.launch", "print_config", str(path))
    assert result.returncode == 2
    assert_no_traceback(result.stderr)
    assert "line 4 column 3" in result.stderr and "invalid JSON" in result.stderr


def test_missing_file(tmp_path):
    result = run_module("roles.launch", "print_config", str(tmp_path / "nope.json"))
    assert result.returncode == 2
    assert_no_traceback(result.stderr)
    assert "cannot be read (No such file or directory)" in result.stderr


def test_server_index_out_of_range(tmp_path):
    path = write_cluster(tmp_path, cluster_document())
    result = run_module("roles.server", "--role", "worker", "--index", "5", "--cluster", str(path))
    assert result.returncode == 2
    assert_no_traceback(result.stderr)
    assert "error: --index = 5: cluster.json has 2 worker task(s); use an index in 0..1" in result.stderr


def test_server_rejects_chief_role(tmp_path):
    path = write_cluster(tmp_path, cluster_document())
    result = run_module("roles.server", "--role", "chief", "--index", "0", "--cluster", str(path))
    assert result.returncode == 2
    assert "is not a server role; use ps or worker" in result.stderr


def test_shipped_cluster_json_is_valid_and_all_localhost():
    config = cluster_config.load(ROOT / "cluster.json")
    counts = {job: len(config.jobs.get(job, ())) for job in cluster_config.JOBS}
    assert counts == {"chief": 1, "worker": 2, "ps": 2, "evaluator": 1}
    assert all(task.address.is_loopback for task in config.tasks())


def test_tf_config_keeps_evaluator_out_of_training_cluster(tmp_path):
    config = cluster_config.parse(copy.deepcopy(BASE), tmp_path / "c.json")
    chief = taskspec.tf_config(config, config.task("chief", 0))
    assert set(chief["cluster"]) == {"chief", "worker", "ps"}
    assert chief["task"] == {"type": "chief", "index": 0}
    evaluator = taskspec.tf_config(config, config.task("evaluator", 0))
    assert evaluator == {"cluster": {"evaluator": ["localhost:3005"]}, "task": {"type": "evaluator", "index": 0}}


def test_environment_per_task(tmp_path):
    document = mutated(set_path("hosts", "localhost", "gpus", value=[3, 5, 7]))
    config = cluster_config.parse(document, tmp_path / "c.json")
    base = {"PATH": "/bin", "https_proxy": "http://proxy:3128", "HTTP_PROXY": "x"}
    env = {t.name: taskspec.task_environment(config, t, base) for t in config.tasks()}
    assert [env[n]["CUDA_VISIBLE_DEVICES"] for n in ("ps:0", "chief:0", "worker:0", "worker:1", "evaluator:0")] \
        == ["-1", "-1", "3", "5", "7"]
    for variables in env.values():
        assert variables["GRPC_FAIL_FAST"] == "use_caller"
        assert variables["TF_USE_LEGACY_KERAS"] == "1"
        assert variables["PATH"] == "/bin"
        assert "https_proxy" not in variables and "HTTP_PROXY" not in variables
    assert json.loads(env["worker:1"]["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}


def test_print_config_shows_every_task_without_starting_any(tmp_path):
    path = write_cluster(tmp_path, cluster_document())
    result = run_module("roles.launch", "print_config", str(path))
    assert result.returncode == 0, result.stderr
    for name in ("chief:0", "worker:0", "worker:1", "ps:0", "ps:1", "evaluator:0"):
        assert f"# {name} on localhost" in result.stdout
    assert "-m roles.server --role ps --index 1 --cluster" in result.stdout
    assert "export GRPC_FAIL_FAST=use_caller" in result.stdout


def test_schema_names_exactly_the_settings_the_loader_knows():
    schema = json.loads((ROOT / "roles" / "cluster.schema.json").read_text())["properties"]
    assert sorted(schema) == sorted(cluster_config.TOP_LEVEL_KEYS)
    assert tuple(schema["cluster"]["properties"]) == cluster_config.JOBS
    for section, cls in (("launcher", cluster_config.LauncherSettings), ("training", TrainingOptions),
                         ("evaluation", EvaluationOptions), ("slurm", cluster_config.SlurmSettings)):
        assert list(schema[section]["properties"]) == [f.name for f in dataclasses.fields(cls)]
        defaults = {k: v["default"] for k, v in schema[section]["properties"].items()}
        assert defaults == json.loads(json.dumps(dataclasses.asdict(cls()))), section
    host = schema["hosts"]["additionalProperties"]["properties"]
    assert list(host) == [f.name for f in dataclasses.fields(cluster_config.HostSettings)]


# (case id, bytes of the file, text the single error line must hold)
FILE_CASES = [
    ("not UTF-8", b'\xff\xfe{\x00}\x00', "byte 0 = b'\\xff\\xfe{\\x00': is not UTF-8 text; save the file as UTF-8"),
    ("latin-1 text", '{"cluster": {}, "hosts": {"café": {}}}'.encode("latin-1"), "is not UTF-8 text"),
    ("empty", b"", "content = '': the file is empty"),
    ("only blanks", b"  \n\t\n", "the file is empty"),
    ("NaN", b'{"training": {"learning_rate": NaN}}', "NaN is not a JSON number"),
    ("Infinity", b'{"training": {"learning_rate": Infinity}}', "Infinity is not a JSON number"),
    ("repeated key", b'{"training": {"epochs": 2}, "training": {"epochs": 3}}',
     "key 'training' appears twice in one object"),
    ("4300-digit number", b'{"training": {"seed": ' + b"9" * 5000 + b"}}", "is not plain JSON"),
    ("nested too deep", b"[" * 100_000 + b"]" * 100_000, "is not plain JSON"),
    ("a JSON list", b"[]", "document = 'list': must be a JSON object"),
]


@pytest.mark.parametrize("case_id,content,expected", FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_each_unreadable_file_is_one_line_and_exit_2(tmp_path, case_id, content, expected):
    path = tmp_path / "cluster.json"
    path.write_bytes(content)
    result = run_module("roles.launch", "print_config", str(path))
    assert result.returncode == 2, result.stderr
    assert_no_traceback(result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"[launcher] error: {path}: ") and expected in lines[0], lines[0]


def test_utf8_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "cluster.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(BASE).encode())
    assert cluster_config.load(path).task("ps", 1).address.port == 3004


def test_file_named_like_a_number(tmp_path):
    """Fire turns the argument 123 into an int; it must still be read as a file name."""
    (tmp_path / "123").write_text(json.dumps(BASE))
    result = run_module("roles.launch", "print_config", "123", cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr


def test_ipv6_addresses_are_bracketed_in_tf_config(tmp_path):
    document = mutated(set_path("cluster", "ps", value=["[::1]:3003", "[fd00::5]:3004"]))
    config = cluster_config.parse(document, tmp_path / "c.json")
    assert taskspec.tf_config(config, config.task("chief", 0))["cluster"]["ps"] == ["[::1]:3003", "[fd00::5]:3004"]
