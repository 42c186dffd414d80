"""The cut kernel: every planned window of a launch, both sides, cut from a `Memory` (the page cache over PCIe, or
a resident device copy) with its planned transpose and flips, into one block. Imported only where a kernel is built
(it imports Triton).

One program per (window row, side) reads the row's bytes, contiguous in the shard, and writes them where the planned
orientation puts them. Any member layout (uint8 or uint16, 1 to 4 channels, a target at an integer multiple of the
input's size) is cut by this one kernel.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .orient import destination
from .window import window


@triton.jit
def cut_rows(out_ptr, anchor, anchor_addr, low_addr, high_addr, width, plan, start, total, n, h, w, high_offset,
             WORDS: tl.constexpr, PIX_LOW: tl.constexpr, PIX_HIGH: tl.constexpr, SCALE: tl.constexpr,
             FIRST_SIDE: tl.constexpr = 0):
    """One program per (window row r of sample j, side): read the row's bytes (contiguous in the shard) and
    write them where the planned orientation puts them in the side's (n, rows, cols, C) block of `out_ptr`
    (the input block at byte 0, the target block at `high_offset`). A side's pixel is PIX_LOW or PIX_HIGH bytes;
    the target is SCALE times the input's height and width (its window at SCALE times the input's corner).
    The row is read as 16-byte aligned vectors of 4-byte words (wide loads are what PCIe reads of registered
    memory reward), CHUNK bytes at a time, and its bytes picked out of them (`tl.gather`). The words are addressed
    from `anchor` (an int32 device tensor at the 16-byte aligned address `anchor_addr`) so that Triton knows their
    alignment and issues vector loads.
    `plan`: int64 (4, total) rows index, y, x, code of a run's samples; this batch is columns start..start+n.
    FIRST_SIDE 1: the targets only (every input is made by the degradation afterwards: the stored inputs are not
    read)."""
    CHUNK: tl.constexpr = 4 * WORDS - 16
    row = tl.program_id(0)
    side = tl.program_id(1) + FIRST_SIDE
    if SCALE == 1:
        hs = h
        ws = w
    else:
        hs = tl.where(side == 0, h, h * SCALE)
        ws = tl.where(side == 0, w, w * SCALE)
    if PIX_LOW == PIX_HIGH:
        pix = PIX_LOW
    else:
        pix = tl.where(side == 0, PIX_LOW, PIX_HIGH)
    scale = tl.where(side == 0, 1, SCALE)
    # the input's programs past its rows (SCALE > 1) read and write nothing
    row_bytes = tl.where(row < n * hs, ws * pix, 0)
    j = row // hs
    r = row % hs
    base, src_w, y, x, code = window(plan, start, tl.minimum(j, n - 1), total, side, low_addr, high_addr, width)
    src_w = src_w * scale
    y = y * scale
    x = x * scale
    begin = base + ((y + r) * src_w + x) * pix
    aligned = begin - (begin % 16)  # the vectors may reach 15 bytes before and after the row: still in the shard
    shift = (begin - aligned).to(tl.int32)
    word0 = (aligned - anchor_addr) // 4
    # whole vectors only (a mask constant over each 4 words keeps the loads vectorized)
    nwords = tl.where(row_bytes > 0, ((row_bytes + shift + 15) // 16) * 4, 0)
    m = tl.arange(0, WORDS)
    k0 = tl.arange(0, 4 * WORDS)
    plane = j.to(tl.int64) * hs
    dst = out_ptr + tl.where(side == 0, 0, high_offset)
    for c0 in range(0, ws * pix, CHUNK):
        first = tl.multiple_of(word0 + c0 // 4, 4)
        words = tl.load(anchor + first + m, mask=m < tl.multiple_of(nwords - c0 // 4, 4))
        stream = tl.reshape((words[:, None] >> (tl.arange(0, 4) * 8)[None, :]) & 0xFF, [4 * WORDS])
        px = tl.gather(stream, tl.minimum(k0 + shift, 4 * WORDS - 1), axis=0).to(tl.uint8)
        k = c0 + k0
        mask = (k0 < CHUNK) & (k < row_bytes)
        oi, oj = destination(code, r, k // pix, hs, ws)
        tl.store(dst + ((plane + oi) * ws + oj) * pix + k % pix, px, mask=mask)

