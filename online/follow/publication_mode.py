"""The ways a follow-mode run publishes, as data: where a serving version's checkpoint comes from, what it holds, and
whether deltas come between versions (one row per mode; the loop asks the row, not the options)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class PublicationMode:
    """One way of publishing: `own_checkpoint`, a version's checkpoint is its own, written beside training while
    pieces run on (none of a resume's); `with_slots`, that checkpoint holds the tables' optimizer slots too (deltas
    build on it, and base plus deltas is the trained state bit for bit); `shares_periodic`, a version due with a
    periodic checkpoint comes from that one; `deltas`, deltas come between versions, and a run or a stop ends with
    a delta rather than a version."""

    name: str
    own_checkpoint: bool
    with_slots: bool
    shares_periodic: bool
    deltas: bool

    @classmethod
    def of(cls, options) -> PublicationMode:
        """The mode `training` options ask for: deltas when `serving_delta_every_s`, else `serving_checkpoint`'s."""
        return MODES["deltas" if options.serving_delta_every_s else options.serving_checkpoint]


MODES = {mode.name: mode for mode in (
    PublicationMode("settled", own_checkpoint=False, with_slots=True, shares_periodic=True, deltas=False),
    PublicationMode("beside", own_checkpoint=True, with_slots=False, shares_periodic=True, deltas=False),
    PublicationMode("deltas", own_checkpoint=True, with_slots=True, shares_periodic=False, deltas=True),
)}
