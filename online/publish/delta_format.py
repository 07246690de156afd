"""What a serving delta is on disk and how its parts are named: pure Python, shared by the chief that writes deltas
(deltas.py) and the exporter that gives each version the signature applying them (delta_signatures.py); the
follower (follower.py) repeats the little it needs, so that it runs with TensorFlow alone.

`<serving>/deltas/<version>.<sequence>/` holds `delta.index` and `delta.data-*` (a TensorFlow bundle: any reader
of checkpoints reads it) and `manifest.json`. It is written as `.writing-<version>.<sequence>` and renamed, so it is
whole or absent. Its keys are the `apply_delta` signature's input names: per table `<table>__<field>` (its fields:
tables/row_fields.py), per dense weight `<weight>`, where a name is the weight's checkpoint key made short
(`model/` and its attribute suffix dropped, anything but letters and digits made `_`): the same on the chief, which
knows the live model, and in the exporter, which knows the template; no name of a layer given at run time is
involved.
"""

from __future__ import annotations

import re

from tables.row_fields import (CHANGED_AT, HELD, IDS, LAST_SEEN, ROWS, SEPARATOR, SLOT_PREFIX, VECTORS,  # noqa: F401
                               field_key, slot_field)

DIRECTORY = "deltas"  # under the serving directory: not an integer, so TensorFlow Serving never takes it for a version
WRITING_PREFIX = ".writing-"
BUNDLE = "delta"  # the bundle's prefix inside a delta's directory
MANIFEST = "manifest.json"
FORMAT = 1
# the signature's scalar inputs, each a field of the delta's manifest (follower.py repeats them)
VERSION, SEQUENCE, FROM_STEP, READ_STEP = "delta_version", "delta_sequence", "delta_from_step", "delta_read_step"
SCALARS = {VERSION: "version", SEQUENCE: "sequence", FROM_STEP: "from_step", READ_STEP: "read_step"}

_NAME = re.compile(r"^(\d+)\.(\d+)$")


def short_name(checkpoint_key: str) -> str:
    """`model/layer_with_weights-1/table/.ATTRIBUTES/VARIABLE_VALUE` -> `layer_with_weights_1_table` (a dynamic
    table's state prefix `.../state/.ATTRIBUTES/` -> `..._state`)."""
    path = checkpoint_key.split("/.ATTRIBUTES/", 1)[0].removeprefix("model/")
    return re.sub(r"[^A-Za-z0-9]", "_", path)


def unique_names(keys: list[str]) -> dict[str, str]:
    """Each checkpoint key's short name; two keys that would share one are refused."""
    names: dict[str, str] = {}
    for key in keys:
        name = short_name(key)
        if name in names.values():
            raise ValueError(f"two weights of the model have the delta name {name}: rename one of their layers")
        names[key] = name
    return names


def delta_name(version: int, sequence: int) -> str:
    return f"{version}.{sequence}"


def parse_delta_name(name: str) -> tuple[int, int] | None:
    """(version, sequence) of a delta's directory name; None for anything else (a half-written one too)."""
    match = _NAME.match(name)
    return (int(match.group(1)), int(match.group(2))) if match else None
