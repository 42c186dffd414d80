"""`give_back`: the C heap's free memory handed back to the system between a pack's phases. Discovery and probing
free tens of MB of numpy temporaries and small objects; glibc keeps such memory for later allocations (its mmap and
trim thresholds rise with the largest block freed), so without this a pack of N pairs held ~80 bytes a pair more than
it used while it wrote the shards."""

from __future__ import annotations

import ctypes
import sys

_trim = None  # glibc's malloc_trim, once looked up (False: none here)


def give_back() -> None:
    """Return the heap's free pages to the system (glibc's `malloc_trim(0)`); nothing elsewhere."""
    global _trim
    if _trim is None:
        _trim = False
        if sys.platform.startswith("linux"):
            try:
                _trim = ctypes.CDLL(None).malloc_trim
                _trim.argtypes, _trim.restype = [ctypes.c_size_t], ctypes.c_int
            except (OSError, AttributeError):  # (musl has none)
                _trim = False
    if _trim:
        _trim(0)
