"""SplitMix64's finaliser, the planner's one hash of 64-bit values: every per-sample draw, the epoch's order and a
mixed source's key hashes are made of it. Numpy only."""

from __future__ import annotations

import numpy as np

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15  # the increment
MUL1, MUL2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # the finaliser's two multipliers (between xorshifts 30, 27, 31)


def splitmix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser of each uint64 of `x` (a new array; array arithmetic wraps without warnings)."""
    z = np.asarray(x, dtype=np.uint64) + np.uint64(GOLDEN)
    t = z >> np.uint64(30)
    z ^= t
    z *= np.uint64(MUL1)
    np.right_shift(z, np.uint64(27), out=t)
    z ^= t
    z *= np.uint64(MUL2)
    np.right_shift(z, np.uint64(31), out=t)
    z ^= t
    return z


def splitmix_int(x: int) -> int:
    """`splitmix` of one value, in Python integers (no arrays for the one number an epoch's stream starts from)."""
    z = (x + GOLDEN) & M64
    z = ((z ^ (z >> 30)) * MUL1) & M64
    z = ((z ^ (z >> 27)) * MUL2) & M64
    return z ^ (z >> 31)
