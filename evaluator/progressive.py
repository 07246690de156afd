"""Progressive validation (follow mode): each checkpoint is scored on the newest data it has not trained on yet.

Which data a checkpoint has trained on is in its own data ledger (online/follow/ledger.py); which data exists is
in the newest checkpoint's ledger (the files the chief had taken by then). A checkpoint is scored on the pieces
that are not done in its ledger, newest file first, up to `progressive_examples` examples: the model as it
stood, on data that came after. The newest checkpoint usually has trained on everything known; it waits until
a later checkpoint lists newer data (or, once training is complete, is skipped: nothing came after it).
"""

from __future__ import annotations

import os

import tensorflow as tf

from common.bounded import OnceKeys
from models.checkpoints import stored_text
from online.follow.ledger import CHECKPOINT_NAME, Ledger
from data.pieces import WHOLE, Piece


class FixedValidation:
    """The validation split, the same for every checkpoint (a run over a fixed data set)."""

    def __init__(self, dataset: tf.data.Dataset):
        self.dataset = dataset

    def for_checkpoint(self, path: str, newest: str) -> tuple[tf.data.Dataset, str] | None:
        return self.dataset, ""

    def vanished(self) -> bool:
        return False


class ProgressiveValidation:
    """Per checkpoint: the newest landed data it has not trained on, from a FollowedData `data`.

    A file the ledger names may be gone from data_dir (deleted before or after it was trained): it is left out,
    said once; one that goes while a checkpoint is scored makes `vanished` true, and the evaluator scores that
    checkpoint again at its next look, without it."""

    def __init__(self, data, *, examples: int, batch: int, log):
        self.data, self.examples, self.batch, self.log = data, examples, batch, log
        self.gone = OnceKeys()  # files said gone: the newest KEYS_KEPT (one long gone may be said once more)
        self.reading: list[str] = []  # the files of the last dataset handed out

    def for_checkpoint(self, path: str, newest: str) -> tuple[tf.data.Dataset, str] | None:
        """The dataset to score checkpoint `path` on and a note saying what it is, or None when nothing known (as of
        checkpoint `newest`) and still in data_dir is unseen by it yet."""
        pieces = [piece for piece in unseen_pieces(_ledger(path), _ledger(newest)) if self._present(piece.name)]
        if not pieces:
            return None
        names = list(dict.fromkeys(piece.name for piece in pieces))
        self.reading = names
        dataset = tf.data.Dataset.from_tensor_slices(([self.data.path(p.name) for p in pieces],
                                                      [p.begin for p in pieces], [p.end for p in pieces]))
        examples = dataset.flat_map(self.data.examples).take(self.examples)
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        return (examples.batch(self.batch).prefetch(tf.data.AUTOTUNE),
                f"on up to {self.examples} examples it has not trained on, from {shown}")

    def vanished(self) -> bool:
        """Whether a file the last dataset reads has gone since it was built."""
        return not all(self._present(name) for name in self.reading)

    def _present(self, name: str) -> bool:
        if os.path.exists(self.data.path(name)):
            return True
        if self.gone.first(name) and not self.data.removes_trained:
            self.log.warning("%s: gone from %s; checkpoints are scored on the data still there", name, self.data.root)
        return False


def _ledger(path: str) -> Ledger:
    return Ledger.from_json(stored_text(path, CHECKPOINT_NAME) or "")


def unseen_pieces(mine: Ledger, newest: Ledger) -> list[Piece]:
    """Pieces of the files `newest` knows that `mine` has not trained on, newest file first."""
    entries = {entry.name: entry for entry in mine.files}
    unseen = []
    for file in reversed(newest.files):
        if file.outcome in ("quarantined", "lost"):
            continue  # cannot be read, or gone: never scored on
        entry = entries.get(file.name)
        if entry is None and file.size:
            unseen.append(Piece(file.name, 0, WHOLE))  # landed after the checkpoint: all of it
        elif entry is not None and not entry.complete:
            unseen += [Piece(file.name, begin, end) for index, (begin, end) in enumerate(entry.pieces)
                       if index not in entry.done]
    return unseen
