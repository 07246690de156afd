"""The names of the fields a table's rows are read in for a delta (pure Python: the delta format and the follower
name them the same way): a row's number, vector and optimizer slots and its stamp, and for a table whose rows are
given to ids, the held flag, the id and the last step."""

from __future__ import annotations

import re

ROWS, HELD, IDS, LAST_SEEN, VECTORS, CHANGED_AT = "rows", "held", "ids", "last_seen", "vectors", "changed_at"
SLOT_PREFIX = "slot_"
SEPARATOR = "__"


def slot_field(slot: str) -> str:
    return SLOT_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", slot)


def field_key(table: str, field: str) -> str:
    """The bundle key (and delta signature input) of a field of the table of short name `table`."""
    return table + SEPARATOR + field
