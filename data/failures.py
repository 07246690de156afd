"""A record that failed inside a pipeline (on a worker) becomes one UserError line naming it, found by its marker."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
from typing import Callable

from common.errors import Problem, UserError


@dataclasses.dataclass(frozen=True)
class Failure:
    """A kind of bad record: `marker` is asserted in-graph as `[marker] [where]`; `problem(where)` says what to do."""

    marker: str
    problem: Callable[[str], Problem]

    def found_in(self, text: str) -> str | None:
        """The `where` a failure of this kind carries in an error's text (it may reach the chief from a worker)."""
        found = re.search(re.escape(self.marker) + r"\] \[([^\]]*)\]", text)
        return found[1] if found else None


class _WithoutMarked(logging.Filter):
    """Drops TensorFlow's own multi-line reports of the failure (the coordinator logs each failed closure)."""

    def __init__(self, markers: tuple[str, ...]):
        super().__init__()
        self.markers = markers

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(marker in message for marker in self.markers)


@contextlib.contextmanager
def named(*kinds: Failure):
    """Turns a pipeline failure of any of `kinds` into a UserError (one line, exit 2) naming the bad record."""
    import tensorflow as tf

    quiet = _WithoutMarked(tuple(kind.marker for kind in kinds))
    logging.getLogger("tensorflow").addFilter(quiet)
    try:
        yield
    except tf.errors.OpError as error:
        for kind in kinds:
            where = kind.found_in(str(error))
            if where is not None:
                raise UserError(kind.problem(where)) from None
        raise
    finally:
        logging.getLogger("tensorflow").removeFilter(quiet)
