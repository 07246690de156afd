"""What a trackable root (a tf.train.Checkpoint of the model, its optimizers and extras) saves, by checkpoint key:
small values read and restored whole, and tables (variables above a quarter of a chunk, and their shards)
grouped by the rows they share on one device, to be read and restored a chunk at a time.

The keys are TensorFlow's own (`model/layer_with_weights-3/table/.ATTRIBUTES/VARIABLE_VALUE`; a ShardedVariable
as slices of one full-shape key), found by TensorFlow's own graph serialization without reading any value, so a
bundle written from these entries is an ordinary checkpoint: `tf.train.Checkpoint.read` restores it, and a
checkpoint written by `tf.train.Checkpoint.write` restores through them. An object may stream itself instead
(a dynamic table's state): it defines `streamed_parts(keys, chunk_bytes)`, giving its small entries and row groups,
and `restore_streamed(reader, prefix, chunk_bytes)`.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable

import tensorflow as tf
from tensorflow.python.checkpoint import graph_view, save_util
from tensorflow.python.distribute.sharded_variable import ShardedVariable
from tensorflow.python.training.saving import saveable_object

from tables.streaming.rows import CHUNK_BYTES, RowGroup, RowSlice, is_table

GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
ATTRIBUTES = "/.ATTRIBUTES/"
SLOT = "/.OPTIMIZER_SLOT/"  # in the key of a slot a (TF1-style) optimizer keeps for a variable


@dataclasses.dataclass
class SmallEntry:
    """One key (or one slice of it) read and restored whole: `read()` gives its value, `restore(value)` puts
    it back; `rows` is the slice's first row and row count for a slice, else None."""

    key: str
    read: Callable[[], tf.Tensor]
    restore: Callable[[tf.Tensor], None]
    full_shape: tuple[int, ...] | None = None
    rows: tuple[int, int] | None = None

    @property
    def spec(self) -> str:
        from tables.streaming.rows import slice_spec
        return "" if self.rows is None else slice_spec(self.full_shape, self.rows[0], self.rows[0] + self.rows[1])


@dataclasses.dataclass
class Streamed:
    """An object that streams itself (`owner`, whose keys start with `prefix`): what a save writes of it."""

    owner: object
    prefix: str
    small: list[SmallEntry]
    groups: list[RowGroup]


@dataclasses.dataclass
class Saved:
    """The object graph (as TensorFlow's loaders need it), the small entries, the tables' row groups, and the
    objects that stream themselves."""

    graph: bytes
    small: list[SmallEntry]
    groups: list[RowGroup]
    streamed: list[Streamed] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class _Part:
    """A variable saved under `key` as rows `offset` .. of a tensor of `full_shape`."""

    key: str
    variable: tf.Variable
    full_shape: tuple[int, ...]
    offset: int


def saved(root, *, chunk_bytes: int = CHUNK_BYTES, tables: Callable[[str], bool] | None = None) -> Saved:
    """The entries of `root`; nothing is read yet. With `tables`, only the tables whose key it accepts (every small
    value, and every object that streams itself, stays)."""
    serialized, _, _, proto = save_util.serialize_graph_view(graph_view.ObjectGraphView(root))[:4]
    small, parts, others, streamed = [], [], collections.defaultdict(dict), []
    for trackable, tensors in serialized.items():
        owner = getattr(trackable, "obj", trackable)  # a legacy saveable's converter wraps its object
        if hasattr(owner, "streamed_parts"):
            prefix = next(iter(tensors)).rsplit(ATTRIBUTES, 1)[0] + ATTRIBUTES
            streamed.append(Streamed(owner, prefix, *owner.streamed_parts({_local_name(k): k for k in tensors},
                                                                           chunk_bytes)))
            continue
        for key, value in tensors.items():
            if isinstance(owner, ShardedVariable):
                parts += _shards(key, owner)
            elif isinstance(owner, tf.Variable):
                parts.append(_Part(key, owner, tuple(owner.shape.as_list()), 0))
            else:
                others[id(owner)][key] = (owner, value)
    variables = [p for p in parts if isinstance(p, _Part)]
    wanted = [p for p in variables if _is_table(p, chunk_bytes) and (tables is None or tables(p.key))]
    small += [_variable_entry(p) for p in variables if not _is_table(p, chunk_bytes)]
    small += [entry for values in others.values() for entry in _tensor_entries(values)]
    return Saved(proto.SerializeToString(), small, _grouped(wanted), streamed)


def _local_name(key: str) -> str:
    """The name an object gave a tensor in `_serialize_to_tensors`, from its checkpoint key."""
    escaped = key.rsplit(ATTRIBUTES, 1)[-1]
    return escaped.replace(".S", "/").replace("..", ".")


def _shards(key: str, sharded: ShardedVariable) -> list[_Part]:
    full, offset, found = tuple(sharded.shape.as_list()), 0, []
    for shard in sharded.variables:
        found.append(_Part(key, shard, full, offset))
        offset += int(shard.shape[0])
    return found


def _is_table(part: _Part, chunk_bytes: int) -> bool:
    return is_table(part.variable.shape.as_list(), part.variable.dtype, chunk_bytes)


def _variable_entry(part: _Part) -> SmallEntry:
    variable, rows = part.variable, None
    if part.full_shape != tuple(variable.shape.as_list()):
        rows = (part.offset, int(variable.shape[0]))
    return SmallEntry(part.key, variable.read_value, variable.assign, part.full_shape, rows)


def _grouped(tables: list[_Part]) -> list[RowGroup]:
    """Tables sharing rows on one device (a shard and its optimizer slots) as one RowGroup each."""
    by_rows: dict[tuple, list[_Part]] = collections.defaultdict(list)
    for part in tables:
        by_rows[(part.variable.device, part.full_shape[0], part.offset, int(part.variable.shape[0]))].append(part)
    return [_variables_group(members) for members in by_rows.values()]


def _variables_group(members: list[_Part]) -> RowGroup:
    variables = [m.variable for m in members]
    device = variables[0].device

    def read(begin: int, end: int) -> list[tf.Tensor]:
        with tf.device(device):
            rows = tf.range(begin, end, dtype=tf.int64)
            return [tf.gather(v, rows) for v in variables]

    def write(begin: int, end: int, values: list[tf.Tensor]) -> None:
        with tf.device(device):
            rows = tf.range(begin, end, dtype=tf.int64)
            for variable, value in zip(variables, values, strict=True):
                variable.scatter_update(tf.IndexedSlices(value, rows))

    slices = [RowSlice(m.key, m.full_shape, m.offset, m.variable.dtype) for m in members]
    return RowGroup(slices, int(variables[0].shape[0]), read, write, device)


def _tensor_entries(values: dict) -> list[SmallEntry]:
    """The keys of one object that saves computed tensors (no variable): read whole, restored together."""
    owner = next(iter(values.values()))[0]
    restored: dict[str, tf.Tensor] = {}

    def restorer(key: str):
        def restore(value: tf.Tensor) -> None:
            restored[_local_name(key)] = value
            if len(restored) == len(values):
                owner._restore_from_tensors(dict(restored))
        return restore

    return [SmallEntry(key, _reader(value), restorer(key)) for key, (_, value) in values.items()]


def _reader(value) -> Callable[[], tf.Tensor]:
    if isinstance(value, saveable_object.SaveSpec):
        return lambda: value.tensor
    return value if callable(value) else (lambda: value)


def variable_keys(root) -> dict:
    """Each variable `root` saves (by `.ref()`; a ShardedVariable's shards too) and its checkpoint key."""
    serialized = save_util.serialize_graph_view(graph_view.ObjectGraphView(root))[0]
    keys = {}
    for trackable, tensors in serialized.items():
        owner = getattr(trackable, "obj", trackable)
        for key in tensors:
            if isinstance(owner, ShardedVariable):
                keys.update({shard.ref(): key for shard in owner.variables})
            if isinstance(owner, tf.Variable):
                keys[owner.ref()] = key
    return keys


def full_names(graph: bytes) -> dict[str, str]:
    """Checkpoint key -> the name of the variable saved under it, from a bundle's serialized object graph."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    proto = trackable_object_graph_pb2.TrackableObjectGraph()
    proto.ParseFromString(graph)
    return {attribute.checkpoint_key: attribute.full_name for node in proto.nodes for attribute in node.attributes}
