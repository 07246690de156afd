"""A SavedModel of a template (template.py) whose tables hold a checkpoint's rows, linked or written a chunk at a time.

`load_weights` gives the template's small weights the checkpoint's values and returns a Filling for each table
placeholder: which checkpoint key fills which weight is found through the template model's own structure, as
training built it (its keys in a tf.train.Checkpoint are the training checkpoint's). `write` saves the template
as Keras saves any model (graph, signatures, Keras metadata, a tiny variables bundle), then replaces its bundle
by one written key by key: each placeholder's rows linked from the checkpoint's own data files where they can be
(linked_rows.py), else from its Filling in slices of a chunk (which both TensorFlow loaders read back whole into
the `[None, d]` variable; two saved at once while the next is read, at most three chunks held), everything else as
the template saved it. A bundle records each variable's name, which is how a placeholder's key is found in it."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterator

import tensorflow as tf

from online.publish.linked_rows import LinkedRows
from tables.kinds import served_tables
from tables.streaming.bundle import BundleReader, BundleWriter, remove_bundle
from tables.streaming.entries import GRAPH_KEY, full_names, variable_keys
from tables.streaming.rows import CHUNK_BYTES, chunk_rows, is_table, nbytes, row_ranges, slice_spec

VARIABLES = "variables"
SAVES_AT_ONCE = 2


@dataclasses.dataclass
class Filling:
    """Where one exported variable's values come from: `shape` in all, and `chunks(chunk_bytes)` giving (begin,
    end, rows) pieces of at most a chunk (one piece, begin None, for a value saved whole)."""

    shape: list[int]
    chunks: Callable[[int], Iterator[tuple[int | None, int | None, tf.Tensor]]]
    source: tuple[str, str] | None = None  # (checkpoint prefix, key) when its values are one checkpoint key's


def from_checkpoint(reader: BundleReader, key: str) -> Filling:
    """A variable filled from checkpoint key `key`: whole when small, else a chunk of rows at a time."""
    shape = list(reader.shapes[key])

    def chunks(chunk_bytes: int):
        if not is_table(shape, reader.dtypes[key], chunk_bytes):
            yield None, None, reader.whole(key)
            return
        for begin, end in row_ranges(shape[0], chunk_rows(nbytes(shape[1:], reader.dtypes[key]), chunk_bytes)):
            yield begin, end, reader.rows(key, begin, end)

    return Filling(shape, chunks, (reader.prefix, key))


def training_keys(model) -> dict:
    """The training checkpoint's key of each weight of `model` (the template's model as training built it), by
    `ref()`, as each table's kind keys it (a dynamic table's per-row weights are its state's rows; None: no value)."""
    keys = variable_keys(tf.train.Checkpoint(model=model))
    for table in served_tables(model):
        keys.update(table.training_keys(keys))
    return keys


def bundle_keys(model, reader: BundleReader) -> dict:
    """The key of each weight of `model` in a bundle written from it (a SavedModel's), by `ref()`, from the variable
    names the bundle records."""
    by_name = {name: key for key, name in full_names(reader.whole(GRAPH_KEY).numpy()).items()}
    return {weight.ref(): by_name.get(weight_name(weight)) for weight in model.weights}


def load_weights(model, placed: list, reader: BundleReader) -> dict[str, Filling]:
    """Gives each small weight of `model` (the template's model as training built it) its value in the checkpoint
    `reader` reads; returns, by weight name, the Filling of each table placeholder among `placed`."""
    keys = training_keys(model)
    names = [weight_name(weight) for weight in model.weights]
    doubled = sorted({name for name in names if names.count(name) > 1})
    if doubled:
        raise ValueError(f"the model has two weights named {doubled[0]}: export needs each weight's name once")
    fillings = {}
    for weight in model.weights:
        if weight.ref() in keys and keys[weight.ref()] is None:
            continue  # no value in a checkpoint: the template's
        key = keys.get(weight.ref())
        if key is None or not reader.has(key):
            raise KeyError(f"{reader.prefix} holds no value for the model's weight {weight_name(weight)} ({key}): "
                           "a checkpoint of an earlier version, or of another model")
        if any(weight is p for p in placed):
            fillings[weight_name(weight)] = from_checkpoint(reader, key)
        else:
            weight.assign(reader.whole(key))
    return fillings


def _write_filling(writer: BundleWriter, key: str, filling: Filling, chunk_bytes: int) -> None:
    """Saves `filling` as `key`, a chunk a part: two parts saved at once while the next chunk is read (a save waits
    on the disk as much as on the CPU), so at most three chunks are held."""
    with ThreadPoolExecutor(SAVES_AT_ONCE, thread_name_prefix="save") as saving:
        saves = []
        for begin, end, rows in read_ahead(filling.chunks(chunk_bytes)):
            spec = "" if begin is None else slice_spec(filling.shape, begin, end)
            saves.append(saving.submit(writer.add, key, rows, spec))
            if len(saves) == SAVES_AT_ONCE:
                saves.pop(0).result()
        for save in saves:
            save.result()


def keras_serving_default(serve) -> dict:
    """Keras' own `serving_default` signature of `serve`, traced here: Keras traces it only when it saves the
    layers' traces, which a serving version leaves out."""
    from tf_keras.src.saving.legacy import saving_utils

    return {"serving_default": saving_utils.trace_model_call(serve)}


def read_ahead(chunks: Iterator) -> Iterator:
    """`chunks` with the next one read in a thread of its own while the caller uses this one (TensorFlow's reads
    and writes leave the GIL)."""
    with ThreadPoolExecutor(1, thread_name_prefix="read-ahead") as reading:
        pending = reading.submit(next, chunks, None)
        while (chunk := pending.result()) is not None:
            pending = reading.submit(next, chunks, None)
            yield chunk


def weight_name(variable) -> str:
    """A variable's name as bundles record it (`embeddings/table`)."""
    return variable.name.removesuffix(":0")


def write(directory: Path, serve, fillings: dict[str, Filling], *, signatures=None, chunk_bytes: int = CHUNK_BYTES,
          compiled: bool = True, log=None) -> int:
    """Saves the template `serve` into `directory` as a SavedModel, then replaces its variables bundle by one whose
    variables named in `fillings` hold what those give (the rest as the template holds them); a filling that is a
    checkpoint key's whole value is linked from the checkpoint's data files where it can be (linked_rows.py), else
    copied. Returns the bytes linked.

    When `compiled` (output/model), the SavedModel holds the loss, the metrics and each layer's traced functions:
    Keras loads it ready to evaluate. A serving version (not `compiled`) holds its signatures and its layers'
    configurations, not their traces: TensorFlow Serving and `tf.saved_model.load` serve through the signatures,
    Keras loads it from the configurations, and the traces were most of the save's CPU (0.36-0.67 CPU-s against
    0.1 for a small DLRM)."""
    if signatures is None and not compiled:
        signatures = keras_serving_default(serve)
    serve.save(str(directory), save_format="tf", include_optimizer=compiled, signatures=signatures,
               save_traces=compiled)
    saved = str(directory / VARIABLES / VARIABLES)
    template = BundleReader(saved)
    names = full_names(template.whole(GRAPH_KEY).numpy())
    linked = _link(directory / VARIABLES, names, fillings, log)
    streamed = str(directory / VARIABLES / "streamed")
    writer = BundleWriter(streamed)
    filled = set()
    for key in sorted(template.shapes):
        filling = fillings.get(names.get(key, ""))
        if filling is None:
            writer.add(key, template.whole(key))
            continue
        filled.add(names[key])
        if key not in linked.linked:
            _write_filling(writer, key, filling, chunk_bytes)
    missing = sorted(set(fillings) - filled)
    if missing:
        writer.abandon()
        linked.abandon()
        raise KeyError(f"the SavedModel of {directory.name} does not save the weight {missing[0]}")
    writer.finish()
    linked.merge_into(streamed)
    remove_bundle(saved)
    for path in (directory / VARIABLES).glob("streamed.*"):
        path.rename(path.with_name(path.name.replace("streamed.", f"{VARIABLES}.", 1)))
    return linked.bytes


def _link(folder: Path, names: dict, fillings: dict[str, Filling], log) -> LinkedRows:
    """The tables whose rows are one checkpoint's key, linked into `folder` (none when they come from several
    checkpoints, or a link cannot be made: said once in `log`)."""
    sources = {key: fillings[name].source for key, name in names.items()
               if name in fillings and fillings[name].source is not None}
    checkpoints = {checkpoint for checkpoint, _ in sources.values()}
    if len(checkpoints) != 1:
        return LinkedRows("", {}, folder)
    linked = LinkedRows(checkpoints.pop(), {key: source for key, (_, source) in sources.items()}, folder)
    why = linked.link()
    if why is not None and log is not None:
        log.warning("the tables' rows are copied into the version, not linked: %s", why)
    return linked
