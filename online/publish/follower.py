"""Keeps a served model fresh from a run's serving folder: the newest full version, then each delta of it as it lands,
in order; the next full version as soon as one appears. Needs TensorFlow and numpy only: copy this file anywhere.

    python -m online.publish.follower --serving output/serving            # a model kept fresh in this process
    python -m online.publish.follower --serving output/serving \\
        --rest http://replica-1:8501/v1/models/clicks --rest http://replica-2:8501/v1/models/clicks

or, in Python, `Follower("output/serving")`: `catch_up()` applies what landed since (it is idempotent: a delta the
model holds is skipped), `predict(**features)` runs `serving_default`. With `--rest`, the same deltas go to each
TensorFlow Serving replica through its Predict API (`apply_delta`), for every version the replica has loaded,
starting after what the replica says it holds (`applied_through`). A delta is `deltas/<version>.<sequence>/`:
`manifest.json` and a TensorFlow bundle whose keys are `apply_delta`'s inputs (docs/online-training.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np


def _tensorflow_imported_quietly():
    """TensorFlow, imported with file descriptor 2 at /dev/null: its C++ start-up lines ignore TF_CPP_MIN_LOG_LEVEL
    in 2.21 (the project's common/logs.py does the same; this file is copied alone, so it cannot import it)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            import tensorflow
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    return tensorflow


tf = _tensorflow_imported_quietly()

DELTAS, BUNDLE, MANIFEST, TRAINED_THROUGH = "deltas", "delta", "manifest.json", "assets.extra/trained_through.json"
SCALARS = {"delta_sequence": "sequence", "delta_from_step": "from_step", "delta_read_step": "read_step"}
DELTA_NAME = re.compile(r"^(\d+)\.(\d+)$")


def versions(serving: Path) -> list[int]:
    """The full versions in `serving` (integer folders holding a SavedModel), oldest first."""
    return sorted(int(p.name) for p in serving.iterdir() if p.name.isdigit() and (p / "saved_model.pb").exists())


def deltas_of(serving: Path, version: int) -> list[int]:
    """The sequence numbers of `version`'s deltas on disk, in order."""
    folder = serving / DELTAS
    found = [DELTA_NAME.match(p.name) for p in folder.iterdir()] if folder.is_dir() else []
    return sorted(int(m.group(2)) for m in found if m and int(m.group(1)) == version)


def delta_inputs(serving: Path, version: int, sequence: int, wanted: dict) -> tuple[dict, dict]:
    """(the manifest, the inputs `wanted` names, as numpy arrays) of one delta."""
    folder = serving / DELTAS / f"{version}.{sequence}"
    manifest = json.loads((folder / MANIFEST).read_text())
    reader = tf.train.load_checkpoint(str(folder / BUNDLE))
    stored = reader.get_variable_to_shape_map()
    inputs = {}
    for name, spec in wanted.items():
        if name in SCALARS:
            inputs[name] = np.array(manifest[SCALARS[name]], np.int64)
        elif name in stored:
            inputs[name] = reader.get_tensor(name).astype(spec.dtype.as_numpy_dtype, copy=False)
        else:
            raise KeyError(f"delta {version}.{sequence} has no {name}: it was not written for this model")
    return manifest, inputs


class Follower:
    """A model kept fresh from `serving`: load with `catch_up()`, predict with `predict(**features)`."""

    def __init__(self, serving, *, log=print, events=None):
        self.serving, self.log, self.events = Path(serving), log, events
        self.model, self.version, self.sequence = None, None, 0

    def catch_up(self) -> bool:
        """Loads a newer full version if one landed, then applies its deltas not applied yet; whether it changed."""
        newest = versions(self.serving)
        changed = False
        if newest and newest[-1] != self.version:
            self._load(newest[-1])
            changed = True
        if self.model is None or "apply_delta" not in self.model.signatures:
            return changed
        apply = self.model.signatures["apply_delta"]
        for sequence in deltas_of(self.serving, self.version):
            if sequence <= self.sequence:
                continue
            if sequence != self.sequence + 1:
                self.log(f"[follower] version {self.version}: delta {sequence} follows {self.sequence}, which is "
                         "missing; waiting for the next full version")
                break
            manifest, inputs = delta_inputs(self.serving, self.version, sequence, _wanted(apply))
            answer = apply(**{name: tf.constant(value) for name, value in inputs.items()})
            self.sequence = int(answer["sequence"])
            self._note(manifest, "delta")
            changed = True
        return changed

    def _load(self, version: int) -> None:
        path = self.serving / str(version)
        self.model, self.version = tf.saved_model.load(str(path)), version
        through = self.model.signatures.get("applied_through")
        self.sequence = int(through()["sequence"]) if through is not None else 0
        trained = path / TRAINED_THROUGH
        self._note(json.loads(trained.read_text()) if trained.exists() else {"version": version}, "version")

    def _note(self, record: dict, kind: str) -> None:
        where = f"{self.version}" + (f".{self.sequence}" if kind == "delta" else "")
        self.log(f"[follower] serving {kind} {where} (step {record.get('read_step', record.get('optimizer_step'))})")
        if self.events is not None:
            files = record.get("trained_through", record).get("files_done", [])
            with open(self.events, "a") as handle:
                handle.write(json.dumps({"time": time.time(), "kind": kind, "version": self.version,
                                         "sequence": self.sequence, "files": [f["name"] for f in files]}) + "\n")

    def predict(self, **features):
        """`serving_default` of the model as it stands."""
        return self.model.signatures["serving_default"](**features)


def _wanted(signature) -> dict:
    return dict(signature.structured_input_signature[1])


class Replica:
    """A TensorFlow Serving replica's model (its REST `base`: http://host:8501/v1/models/NAME), fed through Predict."""

    def __init__(self, base: str, serving: Path, *, log=print):
        self.base, self.serving, self.log = base.rstrip("/"), serving, log

    def _post(self, version: int, body: dict) -> dict:
        request = urllib.request.Request(f"{self.base}/versions/{version}:predict", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            return json.loads(answer.read())["outputs"]

    def loaded(self) -> list[int]:
        with urllib.request.urlopen(self.base, timeout=10) as answer:
            states = json.loads(answer.read())["model_version_status"]
        return sorted(int(s["version"]) for s in states if s["state"] == "AVAILABLE")

    def catch_up(self) -> None:
        """Sends each loaded version the deltas it lacks, in order."""
        for version in self.loaded():
            held = int(self._post(version, {"signature_name": "applied_through", "inputs": {}})["sequence"])
            for sequence in deltas_of(self.serving, version):
                if sequence != held + 1:
                    continue
                wanted = _specs_of(self.serving / str(version))
                _, inputs = delta_inputs(self.serving, version, sequence, wanted)
                body = {"signature_name": "apply_delta", "inputs": {k: v.tolist() for k, v in inputs.items()}}
                held = int(self._post(version, body)["sequence"])
                self.log(f"[follower] {self.base}: version {version} through delta {held}")


def _specs_of(path: Path) -> dict:
    """`apply_delta`'s inputs of the SavedModel at `path`, read from its signature (no model is loaded)."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel.FromString((path / "saved_model.pb").read_bytes())
    inputs = proto.meta_graphs[0].signature_def["apply_delta"].inputs
    return {name: tf.TensorSpec(None, tf.as_dtype(info.dtype)) for name, info in inputs.items()}


def follow(serving, *, every_s: float = 1.0, rest: list[str] = (), until=None, events=None) -> Follower | None:
    """Catches up every `every_s` until `until()` is true (forever when None): a model in this process, or each
    TensorFlow Serving replica of `rest`."""
    serving = Path(serving)
    targets = [Replica(base, serving) for base in rest] or [Follower(serving, events=events)]
    while True:
        for target in targets:
            try:
                target.catch_up()
            except (OSError, KeyError, ValueError, tf.errors.OpError) as error:  # a file pruned meanwhile, a replica
                # down: said, and tried again at the next look
                print(f"[follower] {getattr(target, 'base', serving)}: {type(error).__name__}: {error}; trying again",
                      file=sys.stderr)
        if until is not None and until():
            return targets[0] if not rest else None
        time.sleep(every_s)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--serving", required=True, help="the run's serving folder (output/serving)")
    parser.add_argument("--every_s", type=float, default=1.0, help="seconds between looks")
    parser.add_argument("--rest", action="append", default=[], help="a TensorFlow Serving model's REST address to "
                        "feed instead of a model here (repeat for each replica)")
    parser.add_argument("--events", help="append a JSON line per version or delta served to this file")
    parser.add_argument("--once", action="store_true", help="catch up once and exit")
    args = parser.parse_args(argv)
    follow(args.serving, every_s=args.every_s, rest=args.rest, events=args.events,
           until=(lambda: True) if args.once else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
