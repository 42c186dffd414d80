"""sRGB's transfer function, as lookup tables for the stored integer types (computed once in float64, used by numpy
and uploaded for the kernels, so both sides start from the same linear values) and as the float32 encode both sides
compute the same way. Numpy only."""

from __future__ import annotations

import functools

import numpy as np

from .base import FULL


@functools.lru_cache(maxsize=4)
def to_linear(dtype: str) -> np.ndarray:
    """float32 table: stored value → linear light in [0, 1] (IEC 61966-2-1)."""
    v = np.arange(int(FULL[dtype]) + 1, dtype=np.float64) / FULL[dtype]
    return np.where(v <= 0.04045, v / 12.92, ((v + 0.055) / 1.055) ** 2.4).astype(np.float32)


def encode(x: np.ndarray, full: float) -> np.ndarray:
    """Linear float32 in [0, 1] → stored values (float32, rounded, not yet cast): sRGB's encoding, as the kernels
    compute it (x^(1/2.4) as exp2(log2(x) / 2.4))."""
    f = np.float32
    with np.errstate(divide="ignore"):
        curve = f(1.055) * np.exp2(np.log2(x) * f(1 / 2.4)) - f(0.055)
    s = np.where(x <= f(0.0031308), x * f(12.92), curve)
    return np.floor(s * f(full) + f(0.5))


@functools.lru_cache(maxsize=4)
def log2_linear(dtype: str) -> np.ndarray:
    """float32 table: stored value → log2 of its linear light (-inf for 0): what `lowlight` raises to its power."""
    with np.errstate(divide="ignore"):
        return np.log2(to_linear(dtype).astype(np.float64)).astype(np.float32)
