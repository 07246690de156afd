"""The kinds of embedding table the toolkit knows, by the name `training.embedding_kind` gives them, and what the
rest of the toolkit asks of a model's tables through them (tables/table_kind.py): a new kind is one module and
its line in KINDS."""

from __future__ import annotations

import tensorflow as tf
import tf_keras

from tables.changed_rows import TrackedTable
from tables.dynamic.kind import DynamicKind
from tables.hashed import HashedKind
from tables.memory import PsTables, slots_per_row
from tables.row_stamps import make_clock
from tables.table_kind import TableKind

KINDS: dict[str, TableKind] = {kind.name: kind for kind in (HashedKind(), DynamicKind())}


def named(name: str) -> TableKind:
    """The kind `training.embedding_kind` names (checked against KINDS with the cluster file)."""
    return KINDS[name]


def saved_layers() -> dict[str, type]:
    """Every kind's layer classes an exported model names, by name (Keras' custom_objects)."""
    return {name: layer for kind in KINDS.values() for name, layer in kind.saved_layers().items()}


def served_tables(model) -> list:
    """The ServedTables (tables/served_table.py) of `model` as export built it, kind by kind."""
    return [table for kind in KINDS.values() for table in kind.served(model)]


def track_changes(model, strategy=None) -> list[TrackedTable]:
    """Gives every table of `model` (a SparseDenseModel whose optimizers are built) its stamps, and its optimizer or
    partitions a stamp clock on each ps; returns the tables. Call before the training step is traced."""
    strategy = strategy or tf.distribute.get_strategy()
    optimizer, clocks = getattr(model, "embedding_optimizer", None), {}

    def clock_beside(variable):
        if variable.device not in clocks:
            with strategy.extended.colocate_vars_with(variable):
                clocks[variable.device] = make_clock()
        return clocks[variable.device]

    tracked = []
    with strategy.scope():
        for layer, kind in kind_layers(model):
            tracked += kind.track(layer, optimizer, strategy, clock_beside)
    return tracked


def table_layers(model) -> list:
    """Every layer of `model` (nested ones too) that holds embedding tables: each kind's, and Keras Embeddings (a
    user model's, trained by the table optimizer too)."""
    kinds = {id(layer) for layer, _ in kind_layers(model)}
    return [layer for layer in model._flatten_layers(include_self=False)
            if id(layer) in kinds or isinstance(layer, tf_keras.layers.Embedding)]


def kind_layers(model) -> list:
    """(layer, kind) for every table layer of `model` of a kind, in the model's order."""
    kind_of = {id(layer): kind for kind in KINDS.values() for layer in kind.layers(model)}
    return [(layer, kind_of[id(layer)]) for layer in model._flatten_layers(include_self=False)
            if id(layer) in kind_of]


def table_report(model):
    """What `model`'s tables hold per ps, for the progress line and summary (a TableReport), or None."""
    for kind in KINDS.values():
        report = kind.report(kind.layers(model))
        if report is not None:
            return report
    return None


def ps_account(model, shards_of) -> dict[int, PsTables]:
    """{ps index: PsTables} that `model`'s tables hold at full capacity beyond the options' account
    (cluster/ps_memory.py), their rows split as `shards_of(variable)` gives; {} when none does."""
    found: dict[int, PsTables] = {}
    for layer, kind in kind_layers(model):
        for ps, share in kind.ps_account(layer, shards_of, slots_per_row(model)):
            found[ps] = found[ps] + share if ps in found else share
    return found


def earlier_form(checkpoint: str) -> bool:
    """Whether checkpoint `checkpoint` holds a table in a form of earlier versions that restores but cannot be
    exported a chunk at a time: write a checkpoint first."""
    keys = list(tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map())
    return any(kind.earlier_form(keys) for kind in KINDS.values())


def restored_rows(model, reader, keys: dict, chunk_bytes: int) -> list[tuple[str, str, float]]:
    """(table name, what was compared, the largest difference) for each table of `model` just restored whose rows
    predictions alone would not check, against the checkpoint `reader` reads."""
    found = []
    for layer, kind in kind_layers(model):
        compared = kind.check_restored(layer, reader, keys, chunk_bytes)
        if compared is not None:
            found.append((layer.name, *compared))
    return found
