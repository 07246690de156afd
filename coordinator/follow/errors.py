"""What goes wrong in follow mode, told apart in one place: a data file gone before it was trained (the user's to
fix, exit 2) against a lost task (a restart helps, exit 3)."""

from __future__ import annotations

import contextlib
import os

import tensorflow as tf

from common.errors import Problem, UserError

PUT_IT_BACK = "put it back: a file may go once a serving version lists it in trained_through.json"


def removed_before_trained(path: str) -> None:
    """Stops the run, naming `path`, when a file about to be handed out is gone."""
    if not os.path.exists(path):
        raise UserError(Problem("data file", path, "was removed (or renamed) before it was trained", PUT_IT_BACK))


@contextlib.contextmanager
def data_files_named():
    """Inside: a NotFoundError (a file removed while its piece was read) stops the run with one line naming it."""
    try:
        yield
    except tf.errors.NotFoundError as error:
        raise UserError(Problem("data file", ((error.message or "").strip().splitlines() or [""])[0][-300:],
                                "was removed (or renamed) before it was trained", PUT_IT_BACK)) from None
