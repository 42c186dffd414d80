"""The eight orientation codes (flips and 90° rotations of a window) and their numpy reference: the one definition
the planner draws, the workers apply, the GPU kernel and DALI's affine matrices reproduce, and the tests check
against. Numpy only (loader workers import it).

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


def source_index(code: int, h: int, w: int, i: int, j: int) -> tuple[int, int]:
    """Where output pixel (i, j) of an h×w oriented window comes from in the unoriented window (the gather form of
    `orient`, as the GPU kernel and the resident gather compute it)."""
    if code & VFLIP:
        i = h - 1 - i
    if code & HFLIP:
        j = w - 1 - j
    return (j, i) if code & TRANSPOSE else (i, j)


def allowed(code: np.ndarray, h: np.ndarray, w: np.ndarray) -> np.ndarray:
    """`code` with the transpose bit cleared where the window (h×w) is not square."""
    code = np.asarray(code, dtype=np.int64).copy()
    code[np.asarray(h) != np.asarray(w)] &= FLIPS_ONLY
    return code


def matrices(code: np.ndarray, hw: np.ndarray) -> np.ndarray:
    """(n, 2, 3) float32 affine matrices mapping output (x, y) to input coordinates for each code, for windows of
    size hw (n, 2) (DALI's `warp_affine` with `inverse_map`): pixel centres land exactly on pixel centres."""
    code = np.asarray(code, dtype=np.int64)
    hw = np.asarray(hw, dtype=np.float32).reshape(-1, 2)
    h, w = hw[:, 0], hw[:, 1]
    hflip, vflip, trans = (code & HFLIP) != 0, (code & VFLIP) != 0, (code & TRANSPOSE) != 0
    # output (x, y) -> after undoing the flips (x', y') -> before the transpose (y', x') when transposed
    xs = np.where(hflip, -1.0, 1.0).astype(np.float32)
    ys = np.where(vflip, -1.0, 1.0).astype(np.float32)
    xo = np.where(hflip, w, 0.0).astype(np.float32)
    yo = np.where(vflip, h, 0.0).astype(np.float32)
    m = np.zeros((len(code), 2, 3), dtype=np.float32)
    # not transposed: x_in = xs*x + xo, y_in = ys*y + yo; transposed: x_in = ys*y + yo, y_in = xs*x + xo
    m[:, 0, 0] = np.where(trans, 0, xs)
    m[:, 0, 1] = np.where(trans, ys, 0)
    m[:, 0, 2] = np.where(trans, yo, xo)
    m[:, 1, 0] = np.where(trans, xs, 0)
    m[:, 1, 1] = np.where(trans, 0, ys)
    m[:, 1, 2] = np.where(trans, xo, yo)
    return m
