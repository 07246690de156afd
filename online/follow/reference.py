"""The inputs every serving version of a follow-mode run is checked on: a few raw examples as a reader sends them,
taken once (from the folder's data at the start, or from the first piece handed out) and kept as plain arrays.

Reading them and predicting on them run in two functions traced at set-up, which take and give only dense tensors:
after set-up the chief runs no new eager op and traces nothing for them (TensorFlow registers each new function, and
each first eager op of a kind, on every task of the cluster first, and a stopped worker would hold the chief there;
a ragged tensor built outside a function runs such ops). A run started on an empty folder takes them after its first
file lands, perhaps with a worker stopped."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from data import contract
from models import export

COUNT = 16  # reference inputs per version
_PIECE = [tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.int64)]


class ReferenceInputs:
    """Reference inputs of `data` (a followed source) for `model`; the trained model's predictions on them."""

    def __init__(self, data, model):
        self.data, self.model = data, model
        self.spec = None  # the raw batch's, set by the reader's trace
        self.components: list[np.ndarray] | None = None  # the raw batch, flattened (ragged: values, row splits)
        self.saved: dict[str, np.ndarray] | None = None  # as the .npz beside a version holds them
        self._read_piece = tf.function(self._first_of_piece, input_signature=_PIECE)
        self._read_piece.get_concrete_function()  # both traced now, while every task answers
        self._predict = tf.function(self._predictions, input_signature=[tf.nest.flatten(self.spec,
                                                                                         expand_composites=True)])
        self._predict.get_concrete_function()

    def take(self, piece=None) -> bool:
        """Takes them, unless taken already, from `piece` (a follow piece) or, without one, from the newest data in
        the folder (at the start only: that reader is built then); False when there is none to take them from (the
        piece's file gone or empty: the next version tries the next piece)."""
        if self.components is None:
            try:
                if piece is not None:
                    components, saved = self._read_piece(tf.constant(self.data.path(piece.name)),
                                                         tf.constant(piece.begin, tf.int64),
                                                         tf.constant(piece.end, tf.int64))
                else:
                    components, saved = self._first_of_folder()
            except (tf.errors.OpError, StopIteration):
                return False
            self.components = [tensor.numpy() for tensor in components]
            self.saved = {name: export.saved_array(tensor) for name, tensor in saved.items()}
        return True

    def predictions(self) -> np.ndarray:
        """The trained model's predictions on them now (call with no piece running: what the newest checkpoint
        predicts)."""
        return self._predict(self.components).numpy()

    def _first_of_piece(self, path, begin, end):
        batch = contract.batch(self.data.examples(path, begin, end, raw=True), COUNT)
        self.spec = batch.element_spec[0]
        raw = batch.take(1).get_single_element()[0]
        return tf.nest.flatten(raw, expand_composites=True), export.saved_entries(raw)  # an empty piece failed above

    def _first_of_folder(self):
        raw = export.reference_inputs(self.data.split("train", raw=True), COUNT)
        return tf.nest.flatten(raw, expand_composites=True), export.saved_entries(raw)

    def _predictions(self, components):
        inputs = export.model_inputs(self.data, tf.nest.pack_sequence_as(self.spec, components,
                                                                         expand_composites=True))
        if isinstance(self.model.input, dict) and isinstance(inputs, dict):
            inputs = {name: inputs[name] for name in self.model.input}  # what the model takes of the features
        return self.model(inputs, training=False)
