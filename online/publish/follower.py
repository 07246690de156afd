"""Keeps a served model fresh from a run's serving folder: the newest full version, then each delta of it as it lands,
in order; the next full version once it loads and serves no earlier step. Needs TensorFlow and numpy only: copy
this file anywhere (and replica.py beside it for `--rest`).

`python -m online.publish.follower --serving output/serving` keeps a model fresh in this process (in Python:
`Follower("output/serving")`, `catch_up()`, `predict(**features)`); with `--rest http://replica-1:8501/v1/models/m`
(repeated), each TensorFlow Serving replica's loaded versions get the deltas through its Predict API. A delta,
`deltas/<version>.<sequence>/` (`manifest.json` and a TensorFlow bundle whose keys are `apply_delta`'s inputs:
docs/online-training.md), goes only where it follows what the model holds (`refusal`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
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
SCALARS = {"delta_version": "version", "delta_sequence": "sequence", "delta_from_step": "from_step",
           "delta_read_step": "read_step"}  # apply_delta's scalar inputs: manifest fields (as delta_format.py says)
RETRY_S = 60.0  # a version that did not load is tried again after this


def _trained_through(path: Path) -> dict:
    return json.loads((path / TRAINED_THROUGH).read_text()) if (path / TRAINED_THROUGH).exists() else {}


def versions(serving: Path) -> list[int]:
    """The full versions in `serving` (integer folders holding a SavedModel), oldest first."""
    return sorted(int(p.name) for p in serving.iterdir() if p.name.isdigit() and (p / "saved_model.pb").exists())


def deltas_of(serving: Path, version: int) -> list[int]:
    """The sequence numbers of `version`'s deltas on disk, in order."""
    folder = serving / DELTAS
    found = [re.match(r"^(\d+)\.(\d+)$", p.name) for p in folder.iterdir()] if folder.is_dir() else []
    return sorted(int(m.group(2)) for m in found if m and int(m.group(1)) == version)


def delta_inputs(serving: Path, manifest: dict, wanted: dict) -> dict:
    """The inputs `wanted` names of the delta of `manifest`, as numpy arrays."""
    name = f"{manifest['version']}.{manifest['sequence']}"
    reader = tf.train.load_checkpoint(str(serving / DELTAS / name / BUNDLE))
    for key in set(wanted) - set(SCALARS) - set(reader.get_variable_to_shape_map()):
        raise KeyError(f"delta {name} has no {key}: it was not written for this model")
    return {key: np.array(manifest[SCALARS[key]], np.int64) if key in SCALARS else
            reader.get_tensor(key).astype(spec.dtype.as_numpy_dtype, copy=False) for key, spec in wanted.items()}


def refusal(manifest: dict, version: int, sequence: int, step: int | None) -> str:
    """Why the delta of `manifest` does not follow a model at version `version`, delta `sequence`, read at `step`
    (the version's delta start before any; None: not known); "" when it does. As apply_delta's `refused` says it."""
    name = f"delta {manifest['version']}.{manifest['sequence']}"
    if manifest["version"] != version:
        return f"{name} is of version {manifest['version']}, the model is version {version}"
    if manifest["sequence"] != sequence + 1:
        return f"{name} does not follow delta {sequence}: delta {version}.{sequence + 1} is missing"
    if step is not None and manifest["from_step"] != step:
        return (f"{name} starts at step {manifest['from_step']} but the model holds through step {step} (version "
                f"{version}, delta {sequence}): a delta is missing or of another chain")
    return ""


def following(serving: Path, version: int, held: dict, send):
    """Sends (`send(manifest)` -> the model's answer) each delta of `version` on disk after what `held` (a model's
    `applied_through`, kept up to date) says, while they follow it: yields (manifest, "") for each applied, then
    (manifest, why) for the first refused here (`refusal`) or by the model (`refused`; before 0.6 only `applied`)."""
    for number in (number for number in deltas_of(serving, version) if number > held["sequence"]):
        manifest = json.loads((serving / DELTAS / f"{version}.{number}" / MANIFEST).read_text())
        why = refusal(manifest, held["version"], held["sequence"], held["read_step"])
        try:
            answer = {} if why else {k: np.asarray(v).item() for k, v in send(manifest).items()}
        except KeyError as error:  # a bundle without an input the model takes
            why = error.args[0]
        why = why or answer.get("refused", "" if answer["applied"] else f"the model did not apply delta {number}")
        if why:
            yield manifest, why.decode() if isinstance(why, bytes) else why
            return
        held.update(sequence=int(answer["sequence"]), read_step=int(answer["read_step"]))
        yield manifest, ""


def reach(serving: Path, version: int) -> int | None:
    """The step version `version` serves with its deltas on disk that follow each other (its trained_through.json's
    `optimizer_step` before any); None when it says none."""
    record = _trained_through(serving / str(version))
    held = {"version": version, "sequence": 0, "read_step": record.get("delta_from_step")}
    steps = [manifest["read_step"] for manifest, why in following(serving, version, held, lambda manifest: {
        "applied": True, "sequence": manifest["sequence"], "read_step": manifest["read_step"]}) if not why]
    return steps[-1] if steps else record.get("optimizer_step", held["read_step"])


@dataclasses.dataclass
class Served:
    """A loaded version: its `applied_through`, the step it serves, why it takes no more deltas, files to say."""
    model: object
    version: int
    held: dict
    step: int | None
    refused: str = ""
    files: list = dataclasses.field(default_factory=list)


class Follower:
    """A model kept fresh from `serving`: `catch_up()`, `predict(**features)`. The step it serves never goes back: a
    newer version, its deltas on disk applied, replaces the model once it reaches the step served (until then the
    model served takes its own deltas on); a version that does not load is said and tried after `retry_s` again."""

    model = property(lambda self: getattr(self.served, "model", None))
    version = property(lambda self: getattr(self.served, "version", None))
    sequence = property(lambda self: self.served.held["sequence"] if self.served else 0)
    step = property(lambda self: getattr(self.served, "step", None))

    def __init__(self, serving, *, log=print, events=None, retry_s: float = RETRY_S):
        self.serving, self.log, self.events, self.retry_s = Path(serving), log, events, retry_s
        self.served: Served | None = None
        self._waiting, self._held_back = {}, set()  # {version that did not load: when to try again}, versions said

    def catch_up(self) -> bool:
        """Moves to a newer full version when one may, then applies the deltas not applied yet; whether it changed."""
        return self._move() | self._apply(self.served, say=True)  # both run, in this order

    def _move(self) -> bool:
        for version in reversed(versions(self.serving)):
            if self.served is not None and version <= self.served.version:
                return False
            if time.monotonic() < self._waiting.get(version, 0.0) or \
                    self.step is not None and self._below(version, reach(self.serving, version)):
                continue
            candidate = self._load(version)
            if candidate is not None and self._below(version, candidate.step):  # its deltas did not all apply
                self._waiting[version] = time.monotonic() + self.retry_s
            elif candidate is not None:
                self.served = candidate  # one assignment: predict() has the old model or the new one, whole
                self._note(candidate, "version", " (held back until then)" if version in self._held_back else "")
                return True
        return False

    def _below(self, version: int, reached: int | None) -> bool:
        """Whether version `version`, at step `reached` (None: not known), stands below the step served (said once)."""
        if self.step is None or reached is None or reached >= self.step:
            return False
        if version not in self._held_back:
            self._held_back.add(version)
            self.log(f"[follower] version {version} held back: it and its deltas reach step {reached}, below step "
                     f"{self.step} served (version {self.version}, delta {self.sequence}); served once they reach it")
        return True

    def _load(self, version: int) -> Served | None:
        """Version `version` loaded and its deltas on disk applied; None when it does not load (said)."""
        path = self.serving / str(version)
        try:
            model = tf.saved_model.load(str(path))
            through = model.signatures.get("applied_through")
            held = {k: int(v) for k, v in through().items()} if through else {"sequence": 0, "read_step": None}
        except Exception as error:  # a truncated or half-copied version: OpError, DecodeError, OSError, ValueError
            said = (str(error).strip() or "-").splitlines()[0][:200]
            self.log(f"[follower] version {version} does not load ({type(error).__name__}: {said}); what is served "
                     f"stays, trying again in {self.retry_s:.0f} s")
            self._waiting[version] = time.monotonic() + self.retry_s
            return None
        record = _trained_through(path)
        served = Served(model, version, {"version": version, **held},
                        record.get("optimizer_step", held["read_step"]), files=record.get("files_done", []))
        self._apply(served, say=False)
        return served

    def _apply(self, served: Served | None, *, say: bool) -> bool:
        """Applies `served`'s deltas on disk while they follow: the first refused is said and ends them; whether any."""
        if served is None or served.refused or "apply_delta" not in served.model.signatures:
            return False
        signature, applied = served.model.signatures["apply_delta"], False
        wanted = dict(signature.structured_input_signature[1])
        for manifest, why in following(self.serving, served.version, served.held, lambda manifest: signature(
                **{k: tf.constant(v) for k, v in delta_inputs(self.serving, manifest, wanted).items()})):
            if why:
                served.refused = why
                self.log(f"[follower] version {served.version}: {why}; no more of its deltas: waiting for a newer one")
                break
            served.step, applied = served.held["read_step"], True
            served.files += manifest.get("trained_through", {}).get("files_done", [])
            if say:
                self._note(served, "delta")
        return applied

    def _note(self, served: Served, kind: str, after: str = "") -> None:
        sequence = served.held["sequence"]
        where = f"{served.version}.{sequence}" if kind == "delta" else f"{served.version} through delta {sequence}"
        self.log(f"[follower] serving {kind} {where} (step {served.step}){after}")
        if self.events is not None:
            with open(self.events, "a") as handle:
                print(json.dumps({"time": time.time(), "kind": kind, "version": served.version, "sequence": sequence,
                                  "step": served.step, "files": [f["name"] for f in served.files]}), file=handle)
        served.files = []

    def predict(self, **features):
        """`serving_default` of the model as it stands."""
        return self.served.model.signatures["serving_default"](**features)


def replicas(rest: list[str], serving: Path, *, log=print) -> list:
    """A Replica (replica.py, imported only here) for each TensorFlow Serving REST address of `rest`."""
    if not rest:
        return []
    try:
        from online.publish.replica import Replica
    except ImportError:  # this file copied: replica.py beside it
        try:
            from replica import Replica
        except ImportError:
            sys.exit("[follower] --rest needs replica.py beside this file: copy online/publish/replica.py too")
    return [Replica(base, serving, following, delta_inputs, log=log) for base in rest]


def follow(serving, *, every_s: float = 1.0, rest: list[str] = (), until=None, events=None) -> Follower | None:
    """Catches up every `every_s` until `until()` is true (forever when None): a model in this process, or each
    TensorFlow Serving replica of `rest`."""
    targets = replicas(rest, Path(serving)) or [Follower(serving, events=events)]
    while True:
        for target in targets:
            try:
                target.catch_up()
            except (OSError, KeyError, ValueError, tf.errors.OpError) as error:  # a file pruned, a replica down
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
