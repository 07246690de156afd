"""Records a run keeps for weeks, kept to a size: the newest keys of a once-only set, the newest items of a history."""

from __future__ import annotations

import collections

KEYS_KEPT = 10_000  # once-only keys kept: past it the oldest go, and a line long said may be said once more


class OnceKeys:
    """Keys seen, the newest `kept` of them: `first(key)` is True the first time a key comes (or once more after it
    was pushed out by `kept` newer ones)."""

    def __init__(self, kept: int = KEYS_KEPT):
        self.kept, self._keys = kept, collections.OrderedDict()

    def first(self, key) -> bool:
        if key in self._keys:
            self._keys.move_to_end(key)
            return False
        self._keys[key] = None
        if len(self._keys) > self.kept:
            self._keys.popitem(last=False)
        return True

    def __len__(self) -> int:
        return len(self._keys)
