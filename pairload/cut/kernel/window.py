"""How a kernel reads a run's plan: the one Triton function that finds a planned window (a future kernel, e.g. one
fusing a degradation into the cut, finds its windows with it too). Imported only where a kernel is built.

A run's plan is an int64 (4, total) device tensor (`plan_tensor`: each sample's index, top row, left column and
orientation code), and the `Memory` a kernel cuts from gives each sample's first byte on either side (`low_addr`,
`high_addr`) and its width in pixels (`width`).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def window(plan, start, j, total, side, low_addr, high_addr, width):
    """Column `start + j` of the plan: (the side's first byte in the source, the source's width in pixels, the
    window's top row, its left column, its orientation code); `side` 0 is the input, 1 the target."""
    col = plan + start + j
    i = tl.load(col)
    base = tl.where(side == 0, tl.load(low_addr + i), tl.load(high_addr + i))
    return base, tl.load(width + i), tl.load(col + total), tl.load(col + 2 * total), tl.load(col + 3 * total)
