"""The resident cut for 8-bit RGB pairs: each planned window cut from the split's device copy by square tiles of
pixels, transposed through shared memory, written as whole 4-byte words.

`zerocopy.cut` reads the page cache over PCIe, where the link is the bound and one program per window row is
plenty. From device memory that kernel is bound by its byte stores instead (one per byte, and scattered across rows
for a transposed window). Here each program cuts a TILE×TILE tile of one side of one window:

1. it loads the tile's source rows as 16-byte aligned vectors of 4-byte words (a row of the tile is contiguous in
   the shard, whichever way the window is flipped or turned);
2. picks each pixel's three bytes out of them (`tl.gather`), in reverse order when the window is flipped along the
   rows it reads;
3. transposes the tile when the window is (the planner only transposes square windows), and
4. packs four pixels into three words and stores them, so every store writes a whole word of the batch.

What it cuts is what `zerocopy.cut` and the workers cut, bit for bit (the GPU tests in `tests/test_zerocopy.py`
compare it with the worker path; it was written against the numpy reference in Triton's interpreter,
`TRITON_INTERPRET=1`). It applies to uint8 RGB on both sides at one size, windows whose width is a multiple of 4
pixels (each output row is whole words); `applies` says so, and anything else is cut by `zerocopy.cut`.
"""

from __future__ import annotations

import torch

from ..dihedral import HFLIP, TRANSPOSE, VFLIP

TILE = 64  # pixels on a side of a tile (64: 1024 programs for a batch of 32 crops of 256, 12 KB of output each)
WARPS = 4

_kernel = None
_HF = _VF = _TR = _window = None  # the orientation bits as Triton constants and `kernel_plan.window`: _build


def applies(layout, scale: int) -> bool:
    """Whether `cut` can cut the windows of a batch laid out by `layout` (`members.BatchLayout`) of a split whose
    target is `scale` times its input's size: uint8 RGB on both sides, one size, a width of whole words."""
    low, high = layout.low, layout.high
    return (low.dtype == high.dtype == "uint8" and low.pixel_bytes == high.pixel_bytes == 3 and scale == 1
            and layout.low_shape[2] % 4 == 0)


def _build():
    import triton
    import triton.language as tl

    from .kernel_plan import window

    # the orientation bits (`pairload.dihedral`) as compile-time constants the kernel reads as globals
    globals().update(_HF=tl.constexpr(HFLIP), _VF=tl.constexpr(VFLIP), _TR=tl.constexpr(TRANSPOSE), _window=window)

    @triton.jit
    def cut_tiles(out_words, anchor, anchor_addr, low_addr, high_addr, width, plan, start, total, h, w, high_words,
                  TILE: tl.constexpr, ALIGNED: tl.constexpr):
        """Program (p, side): tile p % tiles of window p // tiles of the launch, on one side (0: the input, whose
        block starts at word 0 of `out_words`; 1: the target, at `high_words`). The source is addressed in 4-byte
        words from `anchor` (an int32 device tensor at the 16-byte aligned address `anchor_addr`), so loads are
        16-byte vectors; `plan`: int64 (4, total) rows index, y, x, code of a run's samples, this launch's windows
        from column `start`. ALIGNED: w is a multiple of 16 (every output row starts on a 16-byte boundary)."""
        tiles_w = (w + TILE - 1) // TILE
        per = ((h + TILE - 1) // TILE) * tiles_w
        pid = tl.program_id(0)
        side = tl.program_id(1)
        j = pid // per
        t = pid % per
        i0 = (t // tiles_w) * TILE
        j0 = (t % tiles_w) * TILE
        base, src_w, y, x, code = _window(plan, start, j, total, side, low_addr, high_addr, width)
        hflip = (code & _HF) != 0
        vflip = (code & _VF) != 0
        turned = (code & _TR) != 0
        # the tile S that is read: S[a, b] = window[R(a), C(b)]. Not turned: R(a) = fV(i0 + a), C(b) = fH(j0 + b);
        # turned (square windows): R(a) = fH(j0 + a), C(b) = fV(i0 + b), and the output tile is S transposed
        # (fX(t): t, or its mirror when the window is flipped that way; `dihedral.source_index`)
        a = tl.arange(0, TILE)
        r0 = tl.where(turned, j0, i0)
        c0 = tl.where(turned, i0, j0)
        row_flip = tl.where(turned, hflip, vflip)
        col_flip = tl.where(turned, vflip, hflip)
        ra = r0 + a
        rows = tl.where(row_flip, h - 1 - ra, ra)
        row_ok = ra < h
        cols = tl.minimum(TILE, w - c0)  # the tile's columns in the window
        first = tl.where(col_flip, w - c0 - cols, c0)  # its leftmost source column
        begin = base + ((y + rows) * src_w + x + first) * 3  # each row's first byte (int64 addresses)
        aligned = begin - begin % 16  # 16-byte vectors: up to 15 bytes before and after, still in the shard
        shift = (begin - aligned).to(tl.int32)
        word0 = tl.multiple_of((aligned - anchor_addr) // 4, 4)
        nwords = ((shift + cols * 3 + 15) // 16) * 4
        k = tl.arange(0, TILE)
        words = tl.load(anchor + word0[:, None] + k[None, :],
                        mask=row_ok[:, None] & (k[None, :] < nwords[:, None]), other=0).to(tl.uint32, bitcast=True)
        # pixel b of S is pixel p of the row read, p = b (or mirrored); its bytes start at shift + 3p
        p = tl.where(col_flip, cols - 1 - a, a)
        byte = shift[:, None] + 3 * p[None, :]
        wi = tl.minimum(tl.maximum(byte // 4, 0), TILE - 1)
        sh = ((byte % 4) * 8).to(tl.uint32)
        lo = tl.gather(words, wi, axis=1)
        hi = tl.gather(words, tl.minimum(wi + 1, TILE - 1), axis=1)
        px = ((lo >> sh) | tl.where(sh == 0, 0, hi << (32 - sh))) & 0xFFFFFF
        if turned:
            px = tl.trans(px)
        # output row i0 + r, pixels j0 .. j0 + TILE: word m holds bytes 4m .. 4m + 3, of pixels 4m // 3 and the next
        q = tl.minimum((4 * a) // 3, TILE - 1)  # (words past the row: masked)
        s = ((4 * a) % 3 * 8).to(tl.uint32)
        first_px = tl.gather(px, tl.broadcast_to(q[None, :], (TILE, TILE)), axis=1)
        next_px = tl.gather(px, tl.broadcast_to(tl.minimum(q + 1, TILE - 1)[None, :], (TILE, TILE)), axis=1)
        packed = ((first_px >> s[None, :]) | (next_px << (24 - s)[None, :])).to(tl.int32, bitcast=True)
        out_cols = tl.minimum(TILE, w - j0)
        at = (j * h + i0 + a).to(tl.int64) * w + j0  # first pixel of each output row of the tile
        row_words = at * 3 // 4 + tl.where(side == 0, 0, high_words)
        if ALIGNED:
            row_words = tl.multiple_of(row_words, 4)
        ok = ((i0 + a) < h)[:, None] & (a[None, :] < (out_cols * 3) // 4)
        tl.store(out_words + row_words[:, None] + a[None, :], packed, mask=ok)

    return cut_tiles


def cut(out: torch.Tensor, anchor: torch.Tensor, source, plan: torch.Tensor, start: int, n: int, h: int, w: int,
        high_offset: int) -> None:
    """Cut windows start..start+n of `plan` (`zerocopy.plan_tensor`), h×w each, from `source` (a device copy with
    `low`, `high`, `width`: `zerocopy.DeviceCopy`) into `out`, a uint8 block of both sides (the input at byte 0, the
    target at `high_offset`), on the current stream. Only where `applies`."""
    global _kernel
    if _kernel is None:
        _kernel = _build()
    tiles = -(-h // TILE) * -(-w // TILE)
    _kernel[(n * tiles, 2)](out.view(-1).view(torch.int32), anchor, anchor.data_ptr(), source.low, source.high,
                            source.width, plan, start, plan.shape[1], h, w, high_offset // 4, TILE=TILE,
                            ALIGNED=w % 16 == 0, num_warps=WARPS)
