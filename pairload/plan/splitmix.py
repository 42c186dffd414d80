"""SplitMix64's finaliser, the planner's one hash of 64-bit values: every per-sample draw and the epoch's order are
made of it. Numpy only."""

from __future__ import annotations

import numpy as np

_M64 = (1 << 64) - 1


def splitmix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser of each uint64 of `x` (a new array; array arithmetic wraps without warnings)."""
    z = np.asarray(x, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    t = z >> np.uint64(30)
    z ^= t
    z *= np.uint64(0xBF58476D1CE4E5B9)
    np.right_shift(z, np.uint64(27), out=t)
    z ^= t
    z *= np.uint64(0x94D049BB133111EB)
    np.right_shift(z, np.uint64(31), out=t)
    z ^= t
    return z


def splitmix_int(x: int) -> int:
    """`splitmix` of one value, in Python integers (no arrays for the one number an epoch's stream starts from)."""
    z = (x + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)
