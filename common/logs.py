"""Log lines for people: each prefixed with its task (`[ps:0]`), TensorFlow's own noise turned down."""

from __future__ import annotations

import logging
import sys
import warnings

_FORMAT = "[{task}] %(asctime)s %(levelname_short)s%(message)s"


class _TaskFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        record.levelname_short = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        return super().format(record)


def task_logger(task_name: str) -> logging.Logger:
    """Returns the logger for this process, writing `[task] HH:MM:SS message` lines to stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_TaskFormatter(_FORMAT.format(task=task_name), datefmt="%H:%M:%S"))
    logger = logging.getLogger("pscluster")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


def quiet_tensorflow() -> None:
    """Keeps TensorFlow's and absl's Python warnings out of the task's log; errors still show."""
    for name in ("tensorflow", "absl", "h5py"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"(tf_keras|tensorflow|keras)\.")
    try:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.ERROR)
    except ImportError:
        pass


def import_tensorflow_quietly() -> None:
    """Imports TensorFlow with file descriptor 2 pointed at /dev/null: its C++ start-up lines (oneDNN, CPU
    features, absl) ignore TF_CPP_MIN_LOG_LEVEL in 2.21 and would land on a person's terminal."""
    import os

    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            import tensorflow  # noqa: F401
            import tf_keras  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)
