"""The signatures a serving version carries beside `serving_default` so that a server keeps it fresh in place:
`apply_delta` writes a delta (delta_format.py) into the served variables, `applied_through` says which it holds.

`apply_delta` takes, per table, the rows a delta holds (a hashed table: row numbers and vectors; a dynamic table:
row numbers, held flags, ids and vectors), every dense weight whole, and the delta's version, sequence number and
steps. It applies a delta only if it follows what the model holds: of its version, the next one (its sequence one
more than the last applied), starting at the step the last one was read at (the version's own before any). Any
other changes nothing and is answered with the reason (`refused`), so calling it twice, out of order, or with a
delta of another chain is safe. Each table writes its rows as its kind does (tables/served_table.py: a dynamic
table keeps its id -> row index right); dense weights are overwritten. Both `tf.saved_model.load` and TensorFlow
1's loader (TensorFlow Serving's) run it; predictions made while it runs may mix rows from before and after.
"""

from __future__ import annotations

import tensorflow as tf

from online.publish import delta_format as names
from online.publish.saved_model import keras_serving_default, training_keys
from tables.kinds import served_tables


class AppliedThrough(tf.Module):
    """The served model's record of the deltas it holds: its version, the last delta's sequence number (0: none)
    and the step that delta was read at (the version's own step before any)."""

    def __init__(self, version: int, from_step: int):
        super().__init__(name="applied_through")
        self.version = tf.Variable(tf.constant(version, tf.int64), trainable=False, name="delta_version")
        self.sequence = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="delta_sequence")
        self.read_step = tf.Variable(tf.constant(from_step, tf.int64), trainable=False, name="delta_read_step")

    def answer(self, applied) -> dict:
        return {"applied": applied, "version": self.version.read_value(), "sequence": self.sequence.read_value(),
                "read_step": self.read_step.read_value()}

    def refusal(self, version, sequence, from_step) -> tf.Tensor:
        """Why a delta (its version, sequence and from_step) does not follow what is held, "" when it does: in the
        words of follower.py's `refusal` (which skips a delta applied already without asking)."""
        held_version, held, step = self.version.read_value(), self.sequence.read_value(), self.read_step.read_value()
        text, join = tf.strings.as_string, tf.strings.join
        name = join(["delta ", text(version), ".", text(sequence)])
        reasons = [  # the first that holds is the answer
            (tf.not_equal(version, held_version),
             join([name, " is of version ", text(version), ", the model is version ", text(held_version)])),
            (sequence <= held, join([name, " is applied already (the model holds through delta ", text(held), ")"])),
            (tf.not_equal(sequence, held + 1),
             join([name, " does not follow delta ", text(held), ": delta ", text(held_version), ".", text(held + 1),
                   " is missing"])),
            (tf.not_equal(from_step, step),
             join([name, " starts at step ", text(from_step), " but the model holds through step ", text(step),
                   " (version ", text(held_version), ", delta ", text(held), "): a delta is missing or of another "
                   "chain"]))]
        answer = tf.constant("")
        for wrong, why in reversed(reasons):
            answer = tf.where(wrong, why, answer)
        return answer


def version_signatures(serve, inner, serving: dict | None, *, version: int, from_step: int) -> dict:
    """`serving` (the raw-feature export's signatures; None: Keras' own `serving_default`) with the delta ones."""
    if serving is None:
        serving = keras_serving_default(serve)
    return {**serving, **delta_signatures(serve, inner, version=version, from_step=from_step)}


def delta_signatures(serve, inner, *, version: int, from_step: int) -> dict:
    """`apply_delta` and `applied_through` for template `serve` (around `inner`, the model as training built it):
    give them to the SavedModel's save with `serving_default`. `serve` keeps what they write to."""
    state = AppliedThrough(version, from_step)
    serve._track_trackable(state, name="applied_through", overwrite=True)  # saved with it, not a Keras weight
    writes, specs = _writes(inner)

    def apply(inputs: dict):
        def write():
            done = [op for write_one in writes for op in write_one(inputs)]
            with tf.control_dependencies(done):
                return tf.group(state.sequence.assign(inputs[names.SEQUENCE]),
                                state.read_step.assign(inputs[names.READ_STEP]))

        refused = state.refusal(inputs[names.VERSION], inputs[names.SEQUENCE], inputs[names.FROM_STEP])
        applies = tf.equal(refused, "")
        tf.cond(applies, lambda: tf.group(write()), tf.no_op)
        return {**state.answer(applies), "refused": refused}

    scalars = {name: tf.TensorSpec([], tf.int64, name=name) for name in names.SCALARS}
    applying = tf.function(apply).get_concrete_function({**scalars, **specs})
    through = tf.function(lambda: state.answer(tf.constant(False))).get_concrete_function()
    return {"apply_delta": _keywords(applying, sorted({**scalars, **specs})), "applied_through": through}


def _keywords(concrete, input_names: list[str]):
    """A concrete function of one dict as one of keyword arguments (what a signature takes)."""
    specs = {spec.name: spec for spec in concrete.structured_input_signature[0][0].values()}

    @tf.function(input_signature=[specs[name] for name in input_names])
    def by_name(*tensors):
        return concrete(dict(zip(input_names, tensors, strict=True)))

    return by_name.get_concrete_function()


def _writes(inner) -> tuple[list, dict]:
    """What applying a delta writes (one callable per table or weight, taking the inputs) and the input specs."""
    keys = training_keys(inner)
    writes, specs, done = [], {}, set()
    for table in served_tables(inner):
        name = names.short_name(table.delta_key(keys))
        specs.update(table.delta_inputs(name))
        writes.append(lambda inputs, table=table, name=name: table.apply_delta(name, inputs))
        done |= {weight.ref() for weight in table.weights()}
    for weight in inner.weights:
        key = keys.get(weight.ref())
        if weight.ref() in done or key is None:
            continue
        name = names.short_name(key)
        specs[name] = tf.TensorSpec(weight.shape, weight.dtype, name=name)
        writes.append(lambda inputs, weight=weight, name=name: [weight.assign(inputs[name])])
    names.unique_names([keys[w.ref()] for w in inner.weights if keys.get(w.ref()) and w.ref() not in done])
    return writes, specs
