"""TensorFlow Serving replicas fed a run's serving deltas through their REST Predict API (`python -m
online.publish.follower --rest URL`): each loaded version gets the deltas that follow what it holds. Needs
TensorFlow and numpy only: copied beside a copied follower.py, it serves its `--rest`."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import numpy as np
import tensorflow as tf  # follower.py imported it quietly already

ANSWER_TIMEOUT_S = 600.0  # a replica answers a delta of millions of rows once it has parsed and applied them all
FLOAT_DIGITS = {"float16": 5, "float32": 9, "float64": 17}  # significant digits that read back the same value
JSON_BLOCK_ROWS = 65536  # rows of an array formatted at a time
NEGATIVE_ZERO = re.compile(r"(?:^|(?<=[\[,]))-0(?=[,\]]|$)")


class Replica:
    """A TensorFlow Serving replica's model (its REST `base`: http://host:8501/v1/models/NAME), fed through Predict:
    each loaded version gets the deltas that follow what it holds (checked here too: a version written before 0.6
    does not check it itself); a refused one is said once. The replica loads and serves versions as its policy
    says, so this cannot hold a newer version back until its deltas are sent: the chief never publishes a version
    older than what the deltas of the one before it served. `following` and `delta_inputs` are follower.py's."""

    def __init__(self, base: str, serving: Path, following, delta_inputs, *, log=print):
        self.base, self.serving, self.log, self._said = base.rstrip("/"), serving, log, set()  # refusals said
        self._following, self._delta_inputs = following, delta_inputs

    def _post(self, version: int, body: str) -> dict:
        request = urllib.request.Request(f"{self.base}/versions/{version}:predict", body.encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=ANSWER_TIMEOUT_S) as answer:
            return json.loads(answer.read())["outputs"]

    def loaded(self) -> list[int]:
        with urllib.request.urlopen(self.base, timeout=10) as answer:
            states = json.loads(answer.read())["model_version_status"]
        return sorted(int(s["version"]) for s in states if s["state"] == "AVAILABLE")

    def catch_up(self) -> None:
        """Sends each loaded version the deltas it lacks, in order."""
        for version in self.loaded():
            held = self._post(version, json.dumps({"signature_name": "applied_through", "inputs": {}}))
            for manifest, why in self._following(self.serving, version, held, lambda manifest, v=version: self._post(
                    v, apply_request(self._delta_inputs(self.serving, manifest, specs_of(self.serving / str(v)))))):
                if not why:
                    self.log(f"[follower] {self.base}: version {version} through delta {manifest['sequence']}")
                elif (version, why) not in self._said:
                    self._said.add((version, why))
                    self.log(f"[follower] {self.base}: version {version}: {why}; not sent")


def apply_request(inputs: dict) -> str:
    """`apply_delta`'s Predict request of `inputs` (numpy arrays) as columnar JSON, floats written with the digits
    that read back the same value (9 for a float32, where json.dumps writes 17): about 0.6x the text in a third of
    the time."""
    named = ", ".join(f"{json.dumps(name)}: {json_array(values)}" for name, values in inputs.items())
    return '{"signature_name": "apply_delta", "inputs": {' + named + "}}"


def json_array(values: np.ndarray) -> str:
    """`values` as a JSON array (nested for two dimensions), a block of rows formatted at a time."""
    digits = FLOAT_DIGITS.get(values.dtype.name)
    if digits is None or values.ndim not in (1, 2):
        return json.dumps(values.tolist())
    item = f"%.{digits}g" if values.ndim == 1 else "[" + ",".join([f"%.{digits}g"] * values.shape[1]) + "]"
    blocks = (values[begin:begin + JSON_BLOCK_ROWS] for begin in range(0, len(values), JSON_BLOCK_ROWS))
    return "[" + ",".join(_formatted(block, item) for block in blocks) + "]"


def _formatted(block: np.ndarray, item: str) -> str:
    text = ",".join([item] * len(block)) % tuple(block.ravel().tolist())
    if (np.signbit(block) & (block == 0)).any():  # "-0" reads back as the integer 0: keep the float's sign
        text = NEGATIVE_ZERO.sub("-0.0", text)
    return text


def specs_of(path: Path) -> dict:
    """`apply_delta`'s inputs of the SavedModel at `path`, read from its signature (no model is loaded)."""
    from tensorflow.core.protobuf import saved_model_pb2
    proto = saved_model_pb2.SavedModel.FromString((path / "saved_model.pb").read_bytes())
    inputs = proto.meta_graphs[0].signature_def["apply_delta"].inputs
    return {name: tf.TensorSpec(None, tf.as_dtype(info.dtype)) for name, info in inputs.items()}
