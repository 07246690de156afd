"""What goes wrong in a follow-mode piece, told apart in one place: its data (its file unreadable, a corrupted
record, a record that does not match the schema, the file gone while it was read), which comes back to the
chief for that piece alone, against a lost task (a ps or worker gone, a resource on a ps that does not exist),
which is raised: a restart helps (exit 3).

A closure that fails makes TensorFlow's ClusterCoordinator cancel the closures queued behind it (at the next
`schedule`): those come back cancelled and are handed out again; what they trained stays in the model, as when
a worker is lost.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

RESOURCE_GONE = ("Resource ", "Container ", "does not exist")  # a NotFoundError of a ps that lost its variables


class DataFailure(NamedTuple):
    """A piece (its `key`) that did not train for its data: `corrupt` when the file cannot be read (quarantined
    at once), else something that may pass (tried again); `cancelled`: it did not run (another piece failed)."""

    key: tuple[int, int]
    why: str
    corrupt: bool = False
    cancelled: bool = False


def first_line(error: Exception) -> str:
    text = getattr(error, "message", None) or str(error)
    return next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)[-300:]


def is_data_error(error: Exception, data_root: str) -> bool:
    """A piece's data failed (not a task): a corrupted record or stream, or an error naming a file of the data
    folder (gone, unreadable, a record not matching the schema)."""
    if isinstance(error, tf.errors.DataLossError):
        return True
    if not isinstance(error, tf.errors.OpError) or isinstance(error, tf.errors.CancelledError):
        return False
    text = str(error)
    if isinstance(error, tf.errors.NotFoundError) and all(part in text for part in RESOURCE_GONE[1:]) \
            and data_root not in text:
        return False
    return data_root in text


def piece_failure(key: tuple[int, int], error: Exception, data_root: str) -> DataFailure | None:
    """The DataFailure of a piece that failed with `error`, or None when it is not the data's (raise it)."""
    if isinstance(error, tf.errors.CancelledError) and "cancelled" in str(error).lower() \
            and "/job:" not in str(error):
        return DataFailure(key, "cancelled", cancelled=True)
    if not is_data_error(error, data_root):
        return None
    corrupt = isinstance(error, (tf.errors.DataLossError, tf.errors.InvalidArgumentError))
    return DataFailure(key, f"cannot be read ({first_line(error)})", corrupt=corrupt)
