"""The GPU decode of lossless `tiles` members (`format.tiles`): the tiles a batch's windows read, of every image of
the batch at once, decompressed by nvCOMP's batched zstd (one call for every frame: no per-frame Python) and put
together by one Triton kernel that undoes each tile's predictor and writes its pixels into the image, exactly as the
CPU's `format.tiles.decode_tiles` does (integer arithmetic: the very pixels stored).

nvCOMP is called through its C library (`memory.nvcomp`): its batched API takes device arrays of frame addresses
and sizes, which numpy computes for a whole batch, where its Python module takes a Python object per frame (36 per
pair). Each member's bytes are checked on the CPU before anything is decoded (its header and tables:
`format.tiles.read_tiled`; each wanted tile's CRC-32 as its bytes are staged), and nvCOMP's status of every frame
once its decode is done.
"""

from __future__ import annotations

import ctypes
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import triton
import triton.language as tl

from ...format.tiles import DAMAGED
from . import tileplan
from .nvcomp import DecompressOpts, library

STAGERS = 4  # threads copying the members' bytes into pinned memory: ~140 MB a call of 256 pairs (600x400, crop 256),
# which 2 threads copied in ~27 ms; through the `ram` loader 8,400 pairs/s with 2, 10,600 with 4 (H200, 2026-11-29)
ROWS = 8  # rows of a tile the kernel sums at once for up to 4 channels, fewer for more (a tile's rows depend on the
# ones above: the rest is parallel)


class TileDecoder:
    """Decodes the wanted tiles of `tiles` members on `device`, on the current stream (`decode`)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.lib = library()
        # per decode call not yet checked: (its frames' statuses as they will be on the host, the event after which
        # they are, each frame's member, the error for a member)
        self._pending: deque = deque()
        self._pool = ThreadPoolExecutor(STAGERS, thread_name_prefix="pairload-stage")

    def decode(self, members: list[tuple], bad: Callable[[int, str], Exception]) -> tuple:
        """Decode `members` ((its bytes, its header and tables as `read_tiled` checked them, the tiles wanted, in
        order)) into images of their own, H×W×C of their dtype, in one uint8 device buffer: tiles not wanted are left
        unwritten, and rows no wanted tile covers are not in the buffer. Returns (each image's device address, where
        its row 0 would be; the buffer; what must stay alive until the kernel reading them is done). Every wanted
        tile's CRC-32 is checked; `bad(m, what)` is the error raised for member m. The decode path plans its calls
        itself, from its split's table (`tileplan`), then `stage` and `submit`."""
        p, table = plan_of(members)
        return self.submit(self.stage(p, [m[0] for m in members], bad, table))

    def stage(self, plan: tileplan.TilePlan, sources: list[np.ndarray], bad: Callable[[int, str], Exception],
              table: tileplan.TileTable) -> "_Staged":
        """The host's part of `decode` (it touches no device): the plan's bytes copied from `sources` into pinned
        memory, each tile's CRC-32 checked as it is copied unless `table`'s memo says it was, before the GPU sees
        them; `bad(m, what)` is the error raised for member m."""
        host = torch.empty(int(plan.staged), dtype=torch.uint8, pin_memory=True)
        found = tileplan.stage(plan, sources, host.numpy(), self._pool, STAGERS, table)
        if found is not None:
            raise bad(found[0], f"{DAMAGED} (tile {found[1]})")
        return _Staged(plan, host, bad)

    def submit(self, staged: "_Staged") -> tuple:
        """The device's part of `decode`, on the current stream: the staged bytes copied over, nvCOMP's batched
        decompression of every frame, the kernel that undoes the predictors. nvCOMP's statuses of earlier calls
        are checked once they are done: waiting for them would keep the host's work from overlapping the GPU's."""
        self.check(block=False)
        stream = torch.cuda.current_stream(self.device)
        plan = staged.plan
        image_at = plan.image_at
        images = self._buffer(int(image_at[-1]))
        stored = self._buffer(int(plan.staged))[:int(plan.staged)]
        stored.copy_(staged.host, non_blocking=True)
        keep: list = [staged.host, stored, images]
        if len(plan.tile_at):
            scratch, statuses = self._zstd(stream, stored, plan, keep)
            keep += _untile_all(plan, scratch, images)
            self._pending.append((*statuses, plan.frame_member, staged.bad))
        return images.data_ptr() + plan.image_base, images, keep

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.check(block=True)

    def check(self, block: bool = True) -> None:
        """Raise for a frame nvCOMP could not decode, of the calls whose decode is done (`block`: of every call,
        waiting for them). Each tile's CRC-32 was checked before its decode: this is the second line."""
        while self._pending and (block or self._pending[0][1].query()):
            statuses, event, member, bad = self._pending.popleft()
            event.synchronize()
            failed = np.flatnonzero(statuses.numpy() != 0)
            if len(failed):
                raise bad(int(member[failed[0]]), f"does not decompress on the GPU (nvCOMP status "
                          f"{int(statuses.numpy()[failed[0]])}, {len(failed)} frames of the batch)")

    def _zstd(self, stream, stored: torch.Tensor, plan, keep: list) -> tuple:
        """Decompress every frame of the plan into a scratch buffer (returned, with the frames' statuses as they
        will be on the host and the event after which they are)."""
        n = len(plan.frame_offset)
        most = int(plan.frame_bytes.max())
        temp = ctypes.c_size_t(0)
        opts = DecompressOpts(0)
        self._ok(self.lib.nvcompBatchedZstdDecompressGetTempSizeAsync(n, most, opts, ctypes.byref(temp),
                                                                      int(plan.frame_bytes.sum())))
        # nvCOMP's working memory, a call's own: calls run on different streams (the first in the loading thread's,
        # the next ones in the decode thread's), and one shared between them was overwritten while another call's
        # decompression read it (an illegal address at 3840x2160, where the calls overlap)
        scratch_temp = self._buffer(max(1, temp.value))
        scratch = self._buffer(int(plan.frame_bytes.sum()))
        table = np.stack([stored.data_ptr() + plan.frame_offset, plan.frame_length, plan.frame_bytes,
                          np.zeros(n, np.int64), scratch.data_ptr() + plan.scratch_at]).astype(np.int64)
        dev = torch.from_numpy(table).pin_memory().to(self.device, non_blocking=True)
        statuses = torch.empty(n, dtype=torch.int32, device=self.device)
        self._ok(self.lib.nvcompBatchedZstdDecompressAsync(
            dev[0].data_ptr(), dev[1].data_ptr(), dev[2].data_ptr(), dev[3].data_ptr(), n, scratch_temp.data_ptr(),
            scratch_temp.numel(), dev[4].data_ptr(), opts, statuses.data_ptr(), stream.cuda_stream))
        keep += [dev, statuses, scratch_temp, scratch]
        host = torch.empty(n, dtype=torch.int32, pin_memory=True)
        host.copy_(statuses, non_blocking=True)
        event = torch.cuda.Event()
        event.record(stream)
        return scratch, (host, event)

    def _buffer(self, n: int) -> torch.Tensor:
        """A device buffer of at least n bytes, of a size among four an octave (`tileplan.bucket`): a call's buffers
        differ in size with the tiles its crops touch, and buffers of every size left torch's caching allocator
        holding 3x the memory in use (23 GB reserved for 7 GB allocated at 3840x2160, H200, 2026-11-30); rounded, a
        freed one fits a later call."""
        return torch.empty(tileplan.bucket(n), dtype=torch.uint8, device=self.device)

    @staticmethod
    def _ok(status: int) -> None:
        if status != 0:
            raise RuntimeError(f"nvCOMP's batched zstd decompression failed to start (status {status})")


@dataclass(frozen=True)
class _Staged:
    """A decode call's host part done (`TileDecoder.stage`): its plan, the staged bytes (pinned), and the error for a
    member."""

    plan: tileplan.TilePlan
    host: torch.Tensor
    bad: Callable[[int, str], Exception]


def plan_of(members: list[tuple]) -> tuple:
    """The plan of a decode call of `members` ((bytes, header and tables, wanted tiles) each, as `decode` takes them)
    and their table (its memo of checked tiles serves later calls of the same members)."""
    n = len(members)
    table = tileplan.TileTable.of([t for _, t, *_ in members])
    wanted = [np.asarray(m[2], dtype=np.int64) for m in members]
    tile = np.concatenate(wanted) if n else np.zeros(0, dtype=np.int64)
    member = np.repeat(np.arange(n), [len(w) for w in wanted])
    return tileplan.plan(table, np.arange(n), np.arange(n), np.zeros(n, dtype=np.int64), member, tile), table


def _untile_all(plan: tileplan.TilePlan, scratch: torch.Tensor, images: torch.Tensor) -> list:
    """One launch per (channels, value size) the batch's tiles have: the kernel per tile; returns the tables the
    launches read."""
    tables = []
    keys = plan.channels * 8 + plan.itemsize
    for key in np.unique(keys):
        sel = np.flatnonzero(keys == key)
        channels, itemsize = int(key) // 8, int(key) % 8
        meta = np.stack([plan.tile_at[sel], plan.tile_h[sel], plan.tile_w[sel], plan.mode[sel], plan.out_at[sel],
                         plan.row_bytes[sel]], axis=1).astype(np.int64)
        dev = torch.from_numpy(meta).pin_memory().to(images.device, non_blocking=True)
        width = int(max(plan.tile_w[sel].max(), 16))
        cp = triton.next_power_of_2(channels)
        _untile[(len(sel),)](scratch, images, dev, CHANNELS=channels, CP=cp, ITEMSIZE=itemsize,
                             BLOCK=triton.next_power_of_2(width), ROWS=max(1, ROWS * 4 // cp), num_warps=8)
        tables.append(dev)
    return tables


@triton.jit
def _untile(scratch, images, meta, CHANNELS: tl.constexpr, CP: tl.constexpr, ITEMSIZE: tl.constexpr,
            BLOCK: tl.constexpr, ROWS: tl.constexpr):
    """One program per tile, ROWS rows at a time: each plane's rows (16-bit values from their high and low byte
    planes), where the tile's predictor is the gradient summed across and down and added to the last row above,
    the colour differences undone, written into the image's rows."""
    pid = tl.program_id(0)
    src = tl.load(meta + pid * 6 + 0)
    th = tl.load(meta + pid * 6 + 1)
    tw = tl.load(meta + pid * 6 + 2)
    mode = tl.load(meta + pid * 6 + 3)
    dst = tl.load(meta + pid * 6 + 4)
    row_bytes = tl.load(meta + pid * 6 + 5)
    ch = tl.arange(0, CP)[:, None, None]
    rr = tl.arange(0, ROWS)[None, :, None]
    cols = tl.arange(0, BLOCK)[None, None, :]
    plane = th * tw
    top = 255 if ITEMSIZE == 1 else 65535
    above = tl.zeros([CP, 1, BLOCK], dtype=tl.int32)
    for r0 in range(0, th, ROWS):
        rows = r0 + rr
        keep = (ch < CHANNELS) & (rows < th) & (cols < tw)
        at = rows * tw + cols
        if ITEMSIZE == 1:
            v = tl.load(scratch + src + ch * plane + at, mask=keep, other=0).to(tl.int32)
        else:
            hi = tl.load(scratch + src + (2 * ch) * plane + at, mask=keep, other=0).to(tl.int32)
            lo = tl.load(scratch + src + (2 * ch + 1) * plane + at, mask=keep, other=0).to(tl.int32)
            v = hi * 256 + lo
        if mode != 0:
            v = (tl.cumsum(tl.cumsum(v, axis=2), axis=1) + above) & top
            above = tl.sum(tl.where(rr == ROWS - 1, v, 0), axis=1)[:, None, :]
        if mode == 2:
            green = tl.sum(tl.where(ch == 1, v, 0), axis=0)[None, :, :]
            v = tl.where((ch == 0) | (ch == 2), (v + green) & top, v)
        out = dst + rows * row_bytes
        if ITEMSIZE == 1:
            tl.store(images + out + cols * CHANNELS + ch, v.to(tl.uint8), mask=keep)
        else:
            tl.store((images + out).to(tl.pointer_type(tl.uint16)) + cols * CHANNELS + ch, v.to(tl.uint16),
                     mask=keep)
