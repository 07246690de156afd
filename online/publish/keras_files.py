"""The Keras formats of a template (template.py) whose tables hold a checkpoint's rows, written a chunk at a time.

Keras writes the template (its small weights already the checkpoint's) as `.h5` or `.keras`; each table
placeholder's one-row dataset is then replaced, in the HDF5 file, by a full-size one filled a chunk at a time.
`.h5` keeps a weight at `model_weights/<top-level layer>/<weight name>`; `.keras` (a zip) keeps its weights in
`model.weights.h5` at paths Keras's own walk of the model gives, recorded while Keras saves.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import zipfile
from pathlib import Path

import h5py
import tf_keras

from online.publish.saved_model import Filling, weight_name
from tables.streaming.rows import CHUNK_BYTES

WEIGHTS_IN_ZIP = "model.weights.h5"


def write_h5(path: Path, serve, fillings: dict[str, Filling], *, chunk_bytes: int = CHUNK_BYTES) -> None:
    serve.save(str(path), save_format="h5")
    places = {f"model_weights/{layer.name}/{weight.name}": weight_name(weight)
              for layer in serve.layers for weight in layer.weights}
    with h5py.File(path, "r+") as handle:
        _fill(handle, {place: fillings[name] for place, name in places.items() if name in fillings}, chunk_bytes)


def write_keras(path: Path, serve, fillings: dict[str, Filling], *, chunk_bytes: int = CHUNK_BYTES) -> None:
    with _recorded_weight_paths() as paths:
        serve.save(str(path))
    places = {place: weight_name(weight) for place, weight in paths.items()}
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        weights = Path(scratch) / WEIGHTS_IN_ZIP
        with zipfile.ZipFile(path) as saved:
            members = {name: saved.read(name) for name in saved.namelist() if name != WEIGHTS_IN_ZIP}
            with saved.open(WEIGHTS_IN_ZIP) as source, open(weights, "wb") as target:
                shutil.copyfileobj(source, target)
        with h5py.File(weights, "r+") as handle:
            _fill(handle, {place: fillings[name] for place, name in places.items() if name in fillings}, chunk_bytes)
        rewritten = Path(scratch) / path.name
        with zipfile.ZipFile(rewritten, "w") as zipped:
            for name, data in members.items():
                zipped.writestr(name, data)
            zipped.write(weights, WEIGHTS_IN_ZIP)
        rewritten.replace(path)


@contextlib.contextmanager
def _recorded_weight_paths():
    """Inside: each variable Keras's `.keras` saving writes, by its path in the weights file (`layers/.../vars/0`)."""
    recorded: dict[str, object] = {}
    original = tf_keras.layers.Layer.save_own_variables

    def recording(layer, store):
        for index, variable in enumerate(layer._trainable_weights + layer._non_trainable_weights):
            recorded[f"{store.name}/{index}".lstrip("/")] = variable  # store: the HDF5 group ".../vars"
        return original(layer, store)

    tf_keras.layers.Layer.save_own_variables = recording
    try:
        yield recorded
    finally:
        tf_keras.layers.Layer.save_own_variables = original


def _fill(handle: h5py.File, fillings: dict[str, Filling], chunk_bytes: int) -> None:
    """Replaces each placeholder dataset (by its path in `handle`) with the rows its Filling gives."""
    for place, filling in fillings.items():
        old = handle[place]
        group, name, dtype = old.parent, place.rsplit("/", 1)[-1], old.dtype
        del group[name]
        dataset = group.create_dataset(name, shape=tuple(filling.shape), dtype=dtype)
        for begin, end, rows in filling.chunks(chunk_bytes):
            if begin is None:
                dataset[...] = rows.numpy()
            else:
                dataset[begin:end] = rows.numpy()
