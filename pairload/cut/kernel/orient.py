"""The orientation codes (`pairload.dihedral`, the one definition) in Triton: their bits as compile-time constants and
the two forms a kernel needs, where an oriented pixel comes from (`source`, the gather form of
`dihedral.source_index`) and where a window's pixel goes (`destination`, its inverse). Imported only where a kernel
is built (it imports Triton)."""

from __future__ import annotations

import triton
import triton.language as tl

from ...dihedral import HFLIP, TRANSPOSE, VFLIP

HF: tl.constexpr = tl.constexpr(HFLIP)
VF: tl.constexpr = tl.constexpr(VFLIP)
TR: tl.constexpr = tl.constexpr(TRANSPOSE)


@triton.jit
def source(code, i, j, h, w):
    """(row, column) in the unoriented window of pixel (i, j) of an h×w window oriented by `code`: the flips undone,
    then the transpose (`dihedral.source_index`)."""
    i = tl.where((code & VF) != 0, h - 1 - i, i)
    j = tl.where((code & HF) != 0, w - 1 - j, j)
    t = (code & TR) != 0
    return tl.where(t, j, i), tl.where(t, i, j)


@triton.jit
def destination(code, r, c, h, w):
    """(row, column) in the h×w oriented window of pixel (r, c) of the unoriented one: `source`'s inverse, the
    transpose, then the flips (`dihedral.orient`)."""
    t = (code & TR) != 0
    i = tl.where(t, c, r)
    j = tl.where(t, r, c)
    return tl.where((code & VF) != 0, h - 1 - i, i), tl.where((code & HF) != 0, w - 1 - j, j)
