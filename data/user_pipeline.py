"""A user's own input pipeline (`training.dataset` = "package.module:function"), read as any other data source.

The toolkit calls `function(split, input_context)` with split "train" or "validation" and a
tf.distribute.InputContext (None in one process: the evaluator, or training with one input pipeline); it returns
an unbatched tf.data.Dataset of (features, label), features one tensor or a dict of them, or None for a split it
does not have (the test split is its validation split, else its training split). A function that reads the
context's `input_pipeline_id` or `num_input_pipelines` shards by it itself; otherwise the toolkit shards by
element (each worker keeps 1 in N). The toolkit repeats, batches and counts: an epoch is the training split's
cardinality // the batch, or `training.steps_per_epoch` when tf.data cannot know the size (files: say how many).
Under ParameterServerStrategy TensorFlow builds the pipeline once for all workers, so the function is called once
per worker, each with that worker's context, and the worker picks its own at run time.

`python -m data.user_pipeline SPEC STEPS_PER_EPOCH EVALUATOR` prints, as JSON, one line per problem the chief
would meet (the launcher runs it on the lead's host before any task starts).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import sys
from typing import Callable, Mapping

import tensorflow as tf

from cluster import user_model
from common.errors import Problem, UserError
from data import contract, unknown_lengths
from data.contract import describe
from data.source import labelled

FIELD = "training.dataset"
FIX = "return an unbatched tf.data.Dataset of (features, label) (docs/your-data.md)"


class WatchedContext(tf.distribute.InputContext):
    """An input context that notes whether the function read which pipeline it feeds (then it shards itself)."""

    def __init__(self, shards: int, index: int):
        super().__init__(num_input_pipelines=shards, input_pipeline_id=index)
        self.read = False

    @property
    def num_input_pipelines(self):
        self.read = True
        return self._num_input_pipelines

    @property
    def input_pipeline_id(self):
        self.read = True
        return self._input_pipeline_id


def _problem(spec: str, problem: str, fix: str = FIX) -> UserError:
    return UserError(Problem(FIELD, spec, problem, fix))


def called(spec: str, function: Callable, split: str, context):
    """The function's dataset for `split`, or None; an error it raises, or anything else it returns, is one line."""
    try:
        dataset = function(split, context)
    except Exception as error:  # noqa: BLE001 - any error in the user's function is the user's to fix
        raise _problem(spec, f"raised {type(error).__name__} for {split!r}: {str(error).splitlines()[0][:200]}",
                       "fix the function (call it yourself as function('train', None) to see)") from None
    if dataset is None:
        return None
    if not isinstance(dataset, tf.data.Dataset):
        raise _problem(spec, f"returned {type(dataset).__name__} for {split!r}, not a tf.data.Dataset")
    element = dataset.element_spec
    if not (isinstance(element, tuple) and len(element) == 2 and isinstance(element[1], tf.TensorSpec)):
        raise _problem(spec, f"gives elements {element} for {split!r}, not (features, label)")
    features = element[0]
    named = isinstance(features, dict) and all(isinstance(k, str) and isinstance(v, tf.TypeSpec)
                                               for k, v in features.items())
    if not (named or isinstance(features, (tf.TensorSpec, tf.RaggedTensorSpec))):
        raise _problem(spec, f"gives features {features} for {split!r}, not a tensor or a dict of them")
    return dataset


def _size(dataset: tf.data.Dataset) -> int | None:
    count = int(dataset.cardinality())
    return count if count >= 0 else None


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelineSource:
    """A dataset function as the coordinator and evaluator use a data.source.DataSource."""

    name: str
    function: Callable
    feature_spec: object
    sizes: Mapping[str, int]  # the splits of known size
    splits: tuple[str, ...]  # "train", and "validation" when the function has it
    shards_itself: bool
    fixed: Mapping[str | None, list] = dataclasses.field(default_factory=dict)  # unknown lengths the model fixes
    num_classes: int | None = None
    one_hot: bool = False
    note: str = ""
    preprocessing = None  # the features are as the function gives them, which is what an exported model takes
    parse_examples = None

    @property
    def raw_spec(self):
        return self.feature_spec

    def _call(self, split: str, context) -> tf.data.Dataset:
        named = split if split in self.splits else ("validation" if "validation" in self.splits else "train")
        return unknown_lengths.conformed(called(self.name, self.function, named, context), self.fixed, self.name)

    def split(self, name: str, *, raw: bool = False) -> tf.data.Dataset:
        """Every example of split `name` once, as the function gives them (one process: context None)."""
        return self._call(name, None)

    def eval_dataset(self, split: str, batch: int, *, raw: bool = False) -> tf.data.Dataset:
        batches = contract.batch(self.split(split), batch)
        return labelled(batches, one_hot=self.one_hot, num_classes=self.num_classes).prefetch(tf.data.AUTOTUNE)

    def _shard(self, shards: int, index: int, one_process: bool) -> tf.data.Dataset:
        context = None if one_process else WatchedContext(shards, index)
        examples = self._call("train", context)
        return examples if one_process or context.read else examples.shard(shards, index)

    def train_dataset_fn(self, global_batch: int, seed: int, *, workers: int | None = None):
        """The dataset_fn for DatasetCreator (see data.source.DataSource); the function shuffles, if it will."""

        def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
            if workers is None:
                shards, index = context.num_input_pipelines, context.input_pipeline_id
                examples = self._shard(shards, index, one_process=shards == 1)
            else:
                index = tf.distribute.coordinator.experimental_get_current_worker_index()
                branches = [functools.partial(self._shard, workers, k, False) for k in range(workers)]
                examples = tf.switch_case(tf.cast(index, tf.int32), branches)
            batches = contract.batch(examples.repeat(), context.get_per_replica_batch_size(global_batch), True)
            return labelled(batches, one_hot=self.one_hot, num_classes=self.num_classes).prefetch(tf.data.AUTOTUNE)

        return dataset_fn

    def steps_per_epoch(self, global_batch: int) -> int:
        if "train" not in self.sizes:
            raise UserError(steps_problem(self.name))
        return max(1, self.sizes["train"] // global_batch)

    def sharding(self, workers: int) -> str:
        if self.shards_itself:
            return f"sharded by {self.name} itself: it reads input_context, one pipeline per worker"
        return (f"sharded by element: {self.name} does not read input_context, so each of {workers} worker(s) "
                f"reads every example and keeps 1 in {workers}")


def steps_problem(spec: str) -> Problem:
    return Problem("training.steps_per_epoch", None, f"{spec}'s training split has no known size (tf.data cannot "
                   "count it)", "give training.steps_per_epoch (steps of one epoch)")


def _signature_problem(spec: str, function: Callable) -> UserError | None:
    try:
        inspect.signature(function).bind("train", None)
    except TypeError:
        return _problem(spec, "cannot be called as function(split, input_context)",
                        "give it exactly those two parameters (others need defaults)")
    except ValueError:
        return None  # no signature to read (a builtin): the call will tell
    return None


def load(spec: str, *, num_classes: int | None = None, one_hot: bool = False,
         declared_inputs=None) -> PipelineSource:
    """The PipelineSource of the function `spec` names, its splits called once each to learn their features and
    sizes; mistakes are one line each (UserError). With `declared_inputs` (the inputs a user model declares, from
    models/input_contract.py's declared_by), they decide how features of unknown length are batched
    (data/unknown_lengths.py)."""
    function = user_model.load(spec, field=FIELD, returning="a tf.data.Dataset")
    wrong = _signature_problem(spec, function)
    if wrong:
        raise wrong
    train = called(spec, function, "train", None)
    if train is None:
        raise _problem(spec, "returned None for 'train'", "return the training split's dataset for 'train'")
    validation = called(spec, function, "validation", None)
    if validation is not None and validation.element_spec != train.element_spec:
        raise _problem(spec, f"gives {describe(validation.element_spec[0])} for 'validation' but "
                             f"{describe(train.element_spec[0])} for 'train'", "give both splits the same features")
    if validation is not None and int(validation.cardinality()) == tf.data.INFINITE_CARDINALITY:
        raise _problem(spec, "gives an endless 'validation' split, which evaluation would never finish",
                       "leave repeat() out of it: the toolkit repeats the training split itself")
    probe = WatchedContext(2, 0)
    called(spec, function, "train", probe)
    sizes = {name: size for name, data in (("train", train), ("validation", validation))
             if data is not None and (size := _size(data)) is not None}
    splits = ("train", "validation") if validation is not None else ("train",)
    given = train.element_spec[0]
    fixed = _fixed_by(declared_inputs, given, num_classes, spec)
    lengths = unknown_lengths.note(given, fixed)
    return PipelineSource(name=spec, function=function, feature_spec=unknown_lengths.fitted(given, fixed),
                          sizes=sizes, splits=splits, shards_itself=probe.read, fixed=fixed, num_classes=num_classes,
                          one_hot=one_hot, note=f"features {describe(given)}; splits {', '.join(splits)}"
                          + (f"; {lengths}" if lengths else ""))


def _fixed_by(declared_inputs, given, num_classes: int | None, spec: str) -> dict:
    """The shapes a user model's declared inputs give the features of unknown length ({} without one: a zoo or
    recommender model takes them ragged as they are described to it)."""
    if declared_inputs is None or not any(unknown_lengths.unknown(one) for one in tf.nest.flatten(given)):
        return {}
    return unknown_lengths.fixed_shapes(given, declared_inputs(contract.normalized(given), num_classes, spec))


def problems(spec: str, steps_per_epoch: int | None, evaluator: bool) -> list[Problem]:
    """What would stop the chief (or the evaluator) with this dataset function, one Problem each."""
    try:
        source = load(spec)
    except UserError as error:
        return error.problems
    found = [] if steps_per_epoch or "train" in source.sizes else [steps_problem(spec)]
    if evaluator and "validation" not in source.splits:
        found.append(Problem(FIELD, spec, "returns None for 'validation', which the evaluator reads",
                             "return the validation split's dataset, or run without an evaluator"))
    return found


if __name__ == "__main__":
    spec, steps, evaluator = sys.argv[1], sys.argv[2], sys.argv[3]
    print(json.dumps([problem.text() for problem in problems(spec, int(steps) if steps != "null" else None,
                                                             evaluator == "true")]))
