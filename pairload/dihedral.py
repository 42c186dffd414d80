"""The eight orientation codes (flips and 90° rotations of a window) and their numpy reference: the one definition
the planner draws and every executor reads (the workers' `orient`, torch's `apply_codes`, the Triton kernels through
`pairload.cut.kernel.orient`, the degradation kernels' counters and DALI's matrices through `source_index`), checked
together by tests/test_orientation.py. Numpy only (loader workers import it).

A code is a bit set, applied after cropping in this order: bit 2 (TRANSPOSE, 4) swaps rows and columns (square
windows only), bit 1 (VFLIP, 2) flips vertically, bit 0 (HFLIP, 1) flips horizontally.
"""

from __future__ import annotations

import numpy as np

HFLIP, VFLIP, TRANSPOSE = 1, 2, 4
CODES = tuple(range(8))
FLIPS_ONLY = HFLIP | VFLIP  # the codes a non-square window may take (a transpose would change its shape)


def orient(window: np.ndarray, code: int) -> np.ndarray:
    """A view of `window` (H×W or H×W×C) under `code`: transpose, then vertical flip, then horizontal flip."""
    if code & TRANSPOSE:
        window = window.swapaxes(0, 1)
    if code & VFLIP:
        window = window[::-1]
    if code & HFLIP:
        window = window[:, ::-1]
    return window


def source_index(code, h, w, i, j) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) in the unoriented window of pixel (i, j) of an h×w window oriented by `code`: the gather form of
    `orient`, the flips undone, then the transpose. Scalars or arrays that broadcast together (0-d arrays for
    scalars)."""
    code = np.asarray(code)
    i = np.where(code & VFLIP, h - 1 - i, i)
    j = np.where(code & HFLIP, w - 1 - j, j)
    t = (code & TRANSPOSE) != 0
    return np.where(t, j, i), np.where(t, i, j)


def allowed(code: np.ndarray, h: np.ndarray, w: np.ndarray) -> np.ndarray:
    """`code` with the transpose bit cleared where the window (h×w) is not square."""
    code = np.asarray(code, dtype=np.int64).copy()
    code[np.asarray(h) != np.asarray(w)] &= FLIPS_ONLY
    return code


def matrices(code: np.ndarray, hw: np.ndarray) -> np.ndarray:
    """(n, 2, 3) float32 affine matrices mapping output (x, y) to input coordinates for each code, for windows of
    size hw (n, 2) (DALI's `warp_affine` with `inverse_map`): `source_index` between pixel centres, which it maps
    exactly onto pixel centres (being affine, it is known by where it sends the origin and the two unit steps)."""
    code = np.asarray(code, dtype=np.int64).reshape(-1)
    hw = np.asarray(hw, dtype=np.float64).reshape(-1, 2)
    h, w = hw[:, 0], hw[:, 1]

    def to_input(x: float, y: float) -> np.ndarray:  # (2, n): the input (x, y) of output point (x, y)
        i, j = source_index(code, h, w, y - 0.5, x - 0.5)
        return np.stack([j + 0.5, i + 0.5])

    origin = to_input(0.0, 0.0)
    m = np.stack([to_input(1.0, 0.0) - origin, to_input(0.0, 1.0) - origin, origin], axis=-1)  # (2, n, 3)
    return np.ascontiguousarray(m.transpose(1, 0, 2), dtype=np.float32)
