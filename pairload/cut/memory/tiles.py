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

from ...format.crc import crc32
from ...format.tiles import DAMAGED
from .nvcomp import DecompressOpts, library

STAGERS = 2  # threads copying the members' bytes into pinned memory (a copy runs at ~10 GB/s a core; the decode
# path reads ~7 GB/s of them at 10,000 pairs/s)
ROWS = 8  # rows of a tile the kernel sums at once for up to 4 channels, fewer for more (a tile's rows depend on the
# ones above: the rest is parallel)


class TileDecoder:
    """Decodes the wanted tiles of `tiles` members on `device`, on the current stream (`decode`)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.lib = library()
        self._temp = torch.empty(0, dtype=torch.uint8, device=device)
        # per decode call not yet checked: (its frames' statuses as they will be on the host, the event after which
        # they are, each frame's member, the error for a member)
        self._pending: deque = deque()
        self._pool = ThreadPoolExecutor(STAGERS, thread_name_prefix="pairload-stage")

    def decode(self, members: list[tuple], bad: Callable[[int, str], Exception]) -> tuple:
        """Decode `members` ((its bytes, its header and tables as `read_tiled` checked them, the tiles wanted[, a
        bool per tile: its CRC-32 already checked in this process, updated here])) into images of their own, H×W×C
        of their dtype (tiles not wanted are left unwritten), in one uint8 device buffer; returns (each image's
        device address, the buffer, what must stay alive until the kernel reading them is done). `stage` then
        `submit`."""
        return self.submit(self.stage(members, bad))

    def stage(self, members: list[tuple], bad: Callable[[int, str], Exception]) -> "_Staged":
        """The host's part of `decode` (it touches no device): the call's plan, and the wanted tiles' bytes copied
        into pinned memory, each tile's CRC-32 checked as it is copied (unless its member's memo says it was), before
        the GPU sees them; `bad(m, what)` is the error raised for member m."""
        image_bytes = np.array([t.h * t.w * t.channels * t.itemsize for _, t, *_ in members], dtype=np.int64)
        image_at = np.concatenate([[0], np.cumsum((image_bytes + 255) // 256 * 256)])
        plan = _frame_plan(members, image_at)
        # only the wanted tiles' frames travel: each run of consecutive wanted tiles is one range of the member
        host = torch.empty(int(plan.staged), dtype=torch.uint8, pin_memory=True)
        staged = host.numpy()

        def stage(runs) -> tuple | None:
            for (m, start, stop, at), tiles in runs:
                staged[at:at + stop - start] = members[m][0][start:stop]
                for lo, hi, crc, tile in tiles:  # while the run's bytes are in the cache
                    if crc32(staged[lo:hi]) != crc:
                        return m, tile
            return None

        work = list(zip(plan.runs, plan.run_tiles))
        for found in self._pool.map(stage, [work[k::STAGERS] for k in range(STAGERS)]):
            if found is not None:
                raise bad(found[0], f"{DAMAGED} (tile {found[1]})")
        for member in members:  # every wanted tile now checked: a member's memo remembers them
            if len(member) > 3 and member[3] is not None:
                member[3][member[2]] = True
        return _Staged(plan, image_at, host, bad)

    def submit(self, staged: "_Staged") -> tuple:
        """The device's part of `decode`, on the current stream: the staged bytes copied over, nvCOMP's batched
        decompression of every frame, the kernel that undoes the predictors. nvCOMP's statuses of earlier calls
        are checked once they are done: waiting for them would keep the host's work from overlapping the GPU's."""
        self.check(block=False)
        stream = torch.cuda.current_stream(self.device)
        plan, image_at = staged.plan, staged.image_at
        images = torch.empty(int(image_at[-1]), dtype=torch.uint8, device=self.device)
        stored = staged.host.to(self.device, non_blocking=True)
        keep: list = [staged.host, stored, images]
        if len(plan.tile_at):
            scratch, statuses = self._zstd(stream, stored, plan, keep)
            keep += _untile_all(plan, scratch, images)
            self._pending.append((*statuses, plan.frame_member, staged.bad))
        return images.data_ptr() + image_at[:-1], images, keep

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
        if self._temp.numel() < temp.value:
            self._temp = torch.empty(max(temp.value, 2 * self._temp.numel()), dtype=torch.uint8, device=self.device)
        scratch = torch.empty(int(plan.frame_bytes.sum()), dtype=torch.uint8, device=self.device)
        table = np.stack([stored.data_ptr() + plan.frame_offset, plan.frame_length, plan.frame_bytes,
                          np.zeros(n, np.int64), scratch.data_ptr() + plan.scratch_at]).astype(np.int64)
        dev = torch.from_numpy(table).pin_memory().to(self.device, non_blocking=True)
        statuses = torch.empty(n, dtype=torch.int32, device=self.device)
        self._ok(self.lib.nvcompBatchedZstdDecompressAsync(
            dev[0].data_ptr(), dev[1].data_ptr(), dev[2].data_ptr(), dev[3].data_ptr(), n, self._temp.data_ptr(),
            self._temp.numel(), dev[4].data_ptr(), opts, statuses.data_ptr(), stream.cuda_stream))
        keep += [dev, statuses, self._temp, scratch]
        host = torch.empty(n, dtype=torch.int32, pin_memory=True)
        host.copy_(statuses, non_blocking=True)
        event = torch.cuda.Event()
        event.record(stream)
        return scratch, (host, event)

    @staticmethod
    def _ok(status: int) -> None:
        if status != 0:
            raise RuntimeError(f"nvCOMP's batched zstd decompression failed to start (status {status})")


@dataclass(frozen=True)
class _Staged:
    """A decode call's host part done (`TileDecoder.stage`): its plan, where each image goes in the images' buffer,
    the staged bytes (pinned), and the error for a member."""

    plan: "_FramePlan"
    image_at: np.ndarray
    host: torch.Tensor
    bad: Callable[[int, str], Exception]


class _FramePlan:
    """What a decode call does: the ranges of the members' bytes staged (`runs`: (member, start, stop, staged
    at), `staged` bytes in all) and per run its tiles' checks ((staged start, end, CRC-32, tile)); then as arrays:
    per frame its offset and length in the staged bytes, its decoded size, where it is decoded to in the scratch
    buffer, and its member; per tile its first frame's scratch offset, size, predictor, channels and value size,
    and the byte offset of its top-left pixel in the images' buffer and its image's row length in bytes."""

    def __init__(self, **columns):
        self.__dict__.update(columns)


def _frame_plan(members, image_at: np.ndarray) -> _FramePlan:
    """The `_FramePlan` of a decode call, computed for all its members at once (numpy over the wanted tiles and
    their frames; the members' tables concatenated)."""
    n = len(members)
    # per member: height, width, channels, value size, tile side, tiles across, frames per tile, tiles
    geo = np.array([(t.h, t.w, t.channels, t.itemsize, t.tile, t.grid[1], t.planes, len(t.modes))
                    for _, t, *_ in members], dtype=np.int64).reshape(n, 8)
    wanted = [np.asarray(m[2], dtype=np.int64) for m in members]
    tile = np.concatenate(wanted) if n else np.zeros(0, np.int64)
    mt = np.repeat(np.arange(n), [len(w) for w in wanted])  # each wanted tile's member
    h, w, c, item, side, across, planes = (geo[mt, k] for k in range(7))
    of_all = _starts(geo[:, 7])[mt] + tile  # each wanted tile among the members' tiles, concatenated
    mode = np.concatenate([t.modes for _, t, *_ in members]).astype(np.int64)[of_all]
    # frames: `planes` per wanted tile, in the members' concatenated tables
    frame_tile = np.repeat(np.arange(len(tile)), planes)
    first = _starts(planes)  # each wanted tile's first frame in the plan
    in_tile = np.arange(len(frame_tile)) - first[frame_tile]
    global_frame = (_starts(geo[:, 7] * geo[:, 6])[mt] + tile * planes)[frame_tile] + in_tile
    member_offset = np.concatenate([t.offsets for _, t, *_ in members])[global_frame]
    length = np.concatenate([t.lengths for _, t, *_ in members])[global_frame]
    # runs of consecutive wanted tiles of one member: their frames lie one after another in its bytes
    new = np.ones(len(tile), dtype=bool)
    new[1:] = (mt[1:] != mt[:-1]) | (tile[1:] != tile[:-1] + 1)
    run = np.cumsum(new) - 1
    run_first = np.flatnonzero(new)
    run_last = np.append(run_first[1:] - 1, len(tile) - 1)
    lo = member_offset[first[run_first]]
    last_frame = first[run_last] + planes[run_last] - 1
    hi = member_offset[last_frame] + length[last_frame]
    at = np.concatenate([[0], np.cumsum((hi - lo + 15) // 16 * 16)])
    frame_offset = (at[:-1] - lo)[run][frame_tile] + member_offset
    gy, gx = np.divmod(tile, np.maximum(across, 1))
    th, tw = np.minimum(side, h - gy * side), np.minimum(side, w - gx * side)
    frame_bytes = np.repeat(th * tw, planes)
    pixel = c * item
    scratch_at = _starts(frame_bytes)
    runs = list(zip(mt[run_first].tolist(), lo.tolist(), hi.tolist(), at[:-1].tolist()))
    # the tiles whose CRC-32 is checked as they are staged: those not checked before (a member's memo)
    need = np.flatnonzero(np.concatenate([~m[3][w] if len(m) > 3 and m[3] is not None else np.ones(len(w), bool)
                                          for m, w in zip(members, wanted)])) if n else tile
    crc = np.concatenate([t.crcs for _, t, *_ in members])[of_all[need]] if n else tile
    last_of_tile = (first + planes - 1)[need]
    checks = list(zip(frame_offset[first[need]].tolist(),
                      (frame_offset[last_of_tile] + length[last_of_tile]).tolist(), crc.tolist(), tile[need].tolist()))
    cut = np.searchsorted(need, np.append(run_first, len(tile))).tolist()  # each run's checks among them
    run_tiles = [checks[a:b] for a, b in zip(cut[:-1], cut[1:])]
    return _FramePlan(runs=runs, run_tiles=run_tiles, staged=max(int(at[-1]), 16), frame_offset=frame_offset,
                      frame_length=length,
                      frame_bytes=frame_bytes, frame_member=mt[frame_tile], scratch_at=scratch_at,
                      tile_at=scratch_at[first], tile_h=th, tile_w=tw, mode=mode,
                      out_at=image_at[:-1][mt] + (gy * side * w + gx * side) * pixel, row_bytes=w * pixel,
                      channels=c, itemsize=item)


def _starts(counts: np.ndarray) -> np.ndarray:
    """Where each of consecutive runs of `counts` starts."""
    counts = np.asarray(counts, dtype=np.int64)
    return np.concatenate([[0], np.cumsum(counts)[:-1]]) if len(counts) else counts


def _untile_all(plan: _FramePlan, scratch: torch.Tensor, images: torch.Tensor) -> list:
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
