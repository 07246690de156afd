"""One partition of a dynamic table: a shard of rows and, on the same ps, the id -> row index that serves it, the
rows' bookkeeping, the admission sketch and the lock that makes every change to them one at a time.

Concurrency. Workers look ids up in the index without the lock, and take a row found so only if, read after the
row's generation, its owner is still the id (a row changing hands writes its owner before its generation: a
generation read before the new owner shows is the old one, which the update then carries and the apply refuses).
When some ids are missing, the step takes the partition's lock (a `tf.CriticalSection`: a mutex on the ps), looks
them up again (another worker may have inserted them meanwhile), counts them in the sketch, takes free rows, gives
them their new owner and generation, resets them to initial values (vector and optimizer slots) and inserts the
ids, all before it lets go. Two workers that meet one new id at once therefore queue: the second finds the first's
entry and uses that row. The sweep (expiry) and every update's apply take the same lock. So one id never has two
rows, a row goes to an id only from the free rows (a first-in-first-out queue: tables/dynamic/allocator.py),
and an update lands only in a row still held at the generation its step read (tables/dynamic/guard.py).

Ids. Every int64 value is an id: no value marks a free row (the generation's parity does).

Sweeps. The training step sweeps: a training lookup that finds a sweep due (tables/dynamic/expiry.py) takes
the lock and, if no other worker swept meanwhile, sweeps. So expiry keeps to steps whatever loop drives them (the
chief's batch hooks under ParameterServerStrategy run when steps are scheduled, a whole epoch's at once, which once
let rows wait an epoch to be freed).
"""

from __future__ import annotations

import uuid

import tensorflow as tf

from cluster import dynamic_table_memory as memory
from tables.dynamic.allocator import RowAllocator
from tables.dynamic.expiry import make_expiry
from tables.dynamic.guard import is_held, next_generation
from tables.dynamic.sketch import AdmissionSketch
from tables.row_stamps import make_stamps, now_after, stamp_rows
from tables.initializers import INIT_SCALE, filled
from tables.placement import COLOCATED_SCOPE

ADMITTED, EXPIRED, TURNED_AWAY, MISDIRECTED = range(4)  # the counters
COUNTERS = 4


def colocated(variable):
    """Creates variables on `variable`'s device (under ParameterServerStrategy too, which would place them
    round-robin)."""
    return tf.distribute.get_strategy().extended.colocate_vars_with(variable)


def _count(counter: int, number) -> tf.Tensor:
    return tf.cast(tf.equal(tf.range(COUNTERS), counter), tf.int64) * tf.cast(number, tf.int64)


class Partition:
    """The index and bookkeeping of one shard of rows (create under the strategy's scope)."""

    def __init__(self, shard, *, admit_after: int, admit_window_steps: int = 1, halve_by_load: bool = True,
                 expire_after_steps: int = 0, expire_after_s: float = 0.0):
        self.shard, self.device, self.rows = shard, shard.device, int(shard.shape[0])
        self.admit_after = int(admit_after)
        self.slots: dict = {}
        self.initial_slots: dict = {}
        self.changed_at, self.clock = None, None  # each row's stamp, once tracked (track_changes)
        with colocated(shard), tf.name_scope(COLOCATED_SCOPE):
            self.owner = tf.Variable(lambda: filled([self.rows], tf.int64, 0), trainable=False, name="row_owner")
            self.generation = tf.Variable(lambda: filled([self.rows], tf.int32, 0), trainable=False,
                                          name="row_generation")
            self.last_seen = tf.Variable(lambda: filled([self.rows], tf.int64, 0), trainable=False,
                                         name="row_last_seen")
            self.counters = tf.Variable(tf.zeros([COUNTERS], tf.int64), trainable=False, name="counters")
            self.allocator = RowAllocator(self.rows)
            self.sketch = AdmissionSketch(self.rows, admit_after, admit_window_steps,
                                          halve_by_load=halve_by_load) if admit_after > 1 else None
            self.expiry = make_expiry(expire_after_steps, expire_after_s)
        with tf.device(self.device):
            self.index = tf.lookup.experimental.MutableHashTable(tf.int64, tf.int64, default_value=-1,
                                                                 experimental_is_anonymous=True)
            # a name of its own: with "" every lock on one ps was one mutex (its eager op's name), and a sweep of
            # two partitions on one ps waited for itself
            self.lock = tf.CriticalSection(shared_name=f"pscluster_table_lock_{uuid.uuid4().hex}")

    def bind(self, slots: dict, initial_slots: dict) -> None:
        """The optimizer's slot variables of this shard (name -> variable) and each one's initial row value."""
        self.slots, self.initial_slots = dict(slots), dict(initial_slots)

    def track_changes(self, clock) -> None:
        """Gives each row a stamp (tables/row_stamps.py): the stamp clock `clock` of this ps, read under the
        lock after a row changes (kept updates, rows given or freed), or after a lookup marked it."""
        with colocated(self.shard), tf.name_scope(COLOCATED_SCOPE):
            self.changed_at = make_stamps(self.rows)
        self.clock = clock

    def _stamp(self, rows, changes: list) -> list:
        """Stamps `rows` with the step read once `changes` ran; nothing when rows are not tracked."""
        if self.changed_at is None:
            return []
        return [stamp_rows(self.changed_at, rows, now_after(changes, self.clock))]

    def lookup(self, ids: tf.Tensor) -> tf.Tensor:
        """Each id's row (int64), or -1: an inference lookup, which changes nothing."""
        with tf.device(self.device):
            return tf.reshape(self.index.lookup(ids), [-1])

    def train_lookup(self, ids: tf.Tensor, sightings: tf.Tensor, step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Each distinct id's (row, the row's generation), admitting missing ids under the lock; row -1 for ids
        without one (not admitted yet, or the partition full). Marks the rows as looked up at `step` (the
        optimizer's step counter, read on this ps), then, when rows expire, sweeps if a sweep is due."""
        with tf.device(self.device):
            # made here first: a cond's input is switched on the device it comes from, and a switch on the worker
            # costs the predicate and the branch's pivot a trip each, every step (a cast, since the graph
            # optimizer removes an identity and switches the worker's tensor again)
            ids, sightings, step = tf.identity(ids), tf.cast(sightings, tf.int64), tf.cast(step, tf.int64)
            found, generations = self._found(ids)
            rows, generations = tf.cond(
                tf.reduce_any(found < 0),
                lambda: self.lock.execute(lambda: self._admit(ids, sightings, found, generations, step),
                                          exclusive_resource_access=False),
                lambda: (found, generations))
            seen = tf.boolean_mask(rows, rows >= 0)
            # a maximum, not a write: a slow worker's step, read long before, never moves a row's stamp back
            touched = self.last_seen.scatter_max(tf.IndexedSlices(tf.fill(tf.shape(seen), step), seen))
            touched = tf.group(touched, *self._stamp(seen, [touched]))
            with tf.control_dependencies([touched]):
                swept = [self.sweep_when_due(step)] if self.expiry is not None else []
            with tf.control_dependencies([touched, *swept]):
                return tf.identity(rows), tf.identity(generations)

    def _found(self, ids) -> tuple[tf.Tensor, tf.Tensor]:
        """Rows the index gives without the lock, each with its generation: -1 where the row is not the id's by
        the time its generation is read (its owner, read after, is another id, or it is free)."""
        found = tf.reshape(self.index.lookup(ids), [-1])
        rows = tf.maximum(found, 0)
        generations = tf.gather(self.generation, rows)
        with tf.control_dependencies([generations]):
            owners = tf.gather(self.owner, rows)
        return tf.where((found >= 0) & is_held(generations) & tf.equal(owners, ids), found, -1), generations

    def _admit(self, ids, sightings, found, generations, step) -> tuple[tf.Tensor, tf.Tensor]:
        missing = tf.where(found < 0)[:, 0]
        candidates = tf.gather(ids, missing)
        again = tf.reshape(self.index.lookup(candidates), [-1])  # under the lock: every earlier insert shows
        new_ids = tf.boolean_mask(candidates, again < 0)
        if self.sketch is None:
            wanted = tf.where(tf.ones_like(new_ids, dtype=tf.bool))[:, 0]
        else:
            wanted = tf.where(self.sketch.admit(new_ids, tf.boolean_mask(tf.gather(sightings, missing),
                                                                         again < 0), step))[:, 0]
        given = self.allocator.take(tf.size(wanted))
        placed = wanted[:tf.size(given)]
        placed_ids = tf.gather(new_ids, placed)
        refused = tf.size(wanted) - tf.size(given)
        owned = self.owner.scatter_update(tf.IndexedSlices(placed_ids, given))
        with tf.control_dependencies([owned]):  # the owner first: see _found
            fresh = next_generation(tf.gather(self.generation, given))
            handed = self.generation.scatter_update(tf.IndexedSlices(fresh, given))
        ready = [handed, self.last_seen.scatter_update(tf.IndexedSlices(tf.fill(tf.shape(given), step), given)),
                 *self._reset(given), self.counters.assign_add(_count(ADMITTED, tf.size(given)) +
                                                                _count(TURNED_AWAY, refused))]
        ready += self._stamp(given, ready)
        with tf.control_dependencies(ready):  # found by lookups only once the row is its id's and reset
            inserted = self.index.insert(placed_ids, given)
        new_rows = tf.tensor_scatter_nd_update(-tf.ones_like(new_ids), placed[:, tf.newaxis], given)
        missing_rows = tf.tensor_scatter_nd_update(again, tf.where(again < 0), new_rows)
        with tf.control_dependencies([inserted]):
            rows = tf.tensor_scatter_nd_update(found, missing[:, tf.newaxis], missing_rows)
            now = tf.gather(self.generation, tf.maximum(missing_rows, 0))  # under the lock: exact
            return rows, tf.tensor_scatter_nd_update(generations, missing[:, tf.newaxis], now)

    def _reset(self, rows: tf.Tensor) -> list:
        """Initial values for rows just given to new ids: a fresh random vector, each optimizer slot's start."""
        count = tf.size(rows)
        width = self.shard.shape[1]
        vectors = tf.random.uniform([count, width], -INIT_SCALE, INIT_SCALE, self.shard.dtype)
        resets = [self.shard.scatter_update(tf.IndexedSlices(vectors, rows))]
        for name, slot in self.slots.items():
            start = tf.broadcast_to(self.initial_slots[name], [count, width])
            resets.append(slot.scatter_update(tf.IndexedSlices(start, rows)))
        return resets

    def apply_unmoved(self, values, rows, generations, apply) -> tf.Tensor:
        """Under the lock: `apply(values, rows)` for the rows still at the generation their update carries; the
        others (given to another id since their step looked them up) are dropped and counted as misdirected."""
        def under_lock():
            kept = tf.where(tf.equal(tf.gather(self.generation, rows), generations))[:, 0]
            applied = apply(tf.gather(values, kept), tf.gather(rows, kept))
            counted = self.counters.assign_add(_count(MISDIRECTED, tf.size(rows) - tf.size(kept)))
            with tf.control_dependencies([applied, counted, *self._stamp(tf.gather(rows, kept), [applied])]):
                return tf.size(kept)

        with tf.device(self.device):
            return self.lock.execute(under_lock, exclusive_resource_access=False)

    def sweep_when_due(self, step: tf.Tensor) -> tf.Tensor:
        """Sweeps when one is due (checked again under the lock: two workers due at once sweep once); returns the
        rows expired, 0 when no sweep was due."""
        def under_lock():
            return tf.cond(self.expiry.due(step), lambda: self._sweep(step), nothing)

        def nothing():
            return tf.constant(0, tf.int64)

        with tf.device(self.device):
            return tf.cond(self.expiry.due(step),
                           lambda: self.lock.execute(under_lock, exclusive_resource_access=False), nothing)

    def _sweep(self, step) -> tf.Tensor:
        """Rows idle too long leave the index, change generation (now free) and join the free rows' queue."""
        held = is_held(self.generation)
        # idle steps as a difference, which stays right where the steps themselves would wrap
        stale = tf.where(held & (step - self.last_seen > self.expiry.idle_limit(step)))[:, 0]
        removed = self.index.remove(tf.gather(self.owner, stale))
        with tf.control_dependencies([removed]):
            freed = self.generation.scatter_update(tf.IndexedSlices(
                next_generation(tf.gather(self.generation, stale)), stale))
        with tf.control_dependencies([freed]):
            queued = self.allocator.give_back(stale)
        counted = self.counters.assign_add(_count(EXPIRED, tf.size(stale)))
        with tf.control_dependencies([queued, counted, self.expiry.mark(step), *self._stamp(stale, [freed])]):
            return tf.size(stale, out_type=tf.int64)

    def stats(self) -> tf.Tensor:
        """[rows, rows in use, ids held, admitted, expired, turned away, misdirected updates]."""
        with tf.device(self.device):
            return tf.concat([tf.constant([self.rows], tf.int64), [self.allocator.in_use()],
                              [self.index.size()], self.counters.read_value()], axis=0)

    def nbytes(self) -> int:
        """Bytes of the bookkeeping variables and the sketch (the id index's: memory.index_bytes)."""
        return memory.bookkeeping_bytes(self.rows, self.admit_after)
