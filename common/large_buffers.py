"""Freed buffers of a megabyte or more go back to the system at once (glibc's mmap threshold, fixed), so a process
that streams a table chunk by chunk on several threads does not keep the chunks it freed.

By default glibc raises its mmap threshold to the size of the last large buffer freed (up to 32 MiB): after the
first 64 MB chunk, chunks come from per-thread arenas, which keep what is freed. In deltas mode (a version's
checkpoint written on a thread beside training, deltas on another) the chief peaked at 1,100 MB with a 1,664 MB
table against 868 MB with a 166 MB one, and at 886 MB with the threshold fixed (bench/RESULTS-memory.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3  # mallopt's parameter (malloc.h)
THRESHOLD_BYTES = 1 << 20


def return_large_buffers_at_once() -> bool:
    """Fixes the mmap threshold at THRESHOLD_BYTES (as MALLOC_MMAP_THRESHOLD_ would); False where the C library
    has no mallopt (not glibc), which then keeps its own policy."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES))
