"""The GPU decode of lossless `tiles` members (`format.tiles`): the tiles a batch's windows read, of every image of
the batch at once, decompressed by nvCOMP's batched zstd (one call for every frame: no per-frame Python) and put
together by one Triton kernel that undoes each tile's predictor and writes its pixels into the image, exactly as the
CPU's `format.tiles.decode_tiles` does (integer arithmetic: the very pixels stored).

nvCOMP is called through its C library (`libnvcomp.so.5`, the `nvidia-libnvcomp-cu12`/`-cu13` wheel that DALI also
installs) with ctypes: its batched API takes device arrays of frame addresses and sizes, which numpy computes for a
whole batch, where its Python module takes a Python object per frame (36 per pair). Each member's bytes are checked
on the CPU before anything is decoded (its header, its frame table, its CRC-32: `format.tiles.read_tiled`), and
nvCOMP's status of every frame is checked before the next batch is decoded.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np
import torch
import triton
import triton.language as tl

from ...format.tiles import TiledImage

_SONAME = "libnvcomp.so.5"


class _DecompressOpts(ctypes.Structure):  # nvcompBatchedZstdDecompressOpts_t: a backend, then zeros
    _fields_ = [("backend", ctypes.c_int), ("reserved", ctypes.c_char * 60)]


def nvcomp_missing() -> str | None:
    """Why nvCOMP's library cannot be loaded here (None: it can)."""
    try:
        _library()
    except OSError as exc:
        return (f"nvCOMP's library ({_SONAME}) cannot be loaded ({exc}); `pip install nvidia-libnvcomp-cu13` (or "
                "-cu12, as your CUDA) decodes the lossless members on the GPU")
    return None


@functools.lru_cache(maxsize=1)
def _library():
    try:
        from nvidia.libnvcomp.load import load_library  # the wheel's own loader finds its copy

        lib = load_library()
    except ImportError:
        lib = None
    lib = lib or ctypes.CDLL(_SONAME, ctypes.RTLD_LOCAL)
    size_t, ptr = ctypes.c_size_t, ctypes.c_void_p
    lib.nvcompBatchedZstdDecompressGetTempSizeAsync.argtypes = [size_t, size_t, _DecompressOpts,
                                                                ctypes.POINTER(size_t), size_t]
    lib.nvcompBatchedZstdDecompressAsync.argtypes = [ptr, ptr, ptr, ptr, size_t, ptr, size_t, ptr, _DecompressOpts,
                                                     ptr, ptr]
    return lib


class TileDecoder:
    """Decodes the wanted tiles of `tiles` members on `device`, on the current stream (`decode`)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.lib = _library()
        self._temp = torch.empty(0, dtype=torch.uint8, device=device)
        self._statuses: tuple | None = None  # (pinned statuses, event, names of the frames' members)

    def decode(self, members: list[tuple[np.ndarray, TiledImage, np.ndarray]], names: list[str]) -> tuple:
        """Decode `members` ((its bytes, its checked header and tables, the tiles wanted)) into images of their own,
        H×W×C of their dtype (tiles not wanted are left unwritten), in one uint8 device buffer; returns (each
        image's device address, the buffer, what must stay alive until the kernel reading them is done).
        `names[m]` names member m in an error."""
        self.check()
        stream = torch.cuda.current_stream(self.device)
        image_bytes = np.array([t.h * t.w * t.channels * t.itemsize for _, t, _ in members], dtype=np.int64)
        image_at = np.concatenate([[0], np.cumsum((image_bytes + 255) // 256 * 256)])
        images = torch.empty(int(image_at[-1]), dtype=torch.uint8, device=self.device)
        plan = _frame_plan(members, image_at)
        # only the wanted tiles' frames travel: each run of consecutive wanted tiles is one range of the member
        host = torch.empty(int(plan.staged), dtype=torch.uint8, pin_memory=True)
        staged = host.numpy()
        for m, start, stop, at in plan.runs:
            staged[at:at + stop - start] = members[m][0][start:stop]
        stored = host.to(self.device, non_blocking=True)
        keep: list = [host, stored, images]
        if len(plan.tile_at):
            scratch, statuses = self._zstd(stream, stored, plan, keep)
            keep += _untile_all(plan, scratch, images)
            self._statuses = (*statuses, [names[m] for m in plan.frame_member])
        return images.data_ptr() + image_at[:-1], images, keep

    def check(self) -> None:
        """Raise for a frame of the last batch nvCOMP could not decode (waits for that batch's decode)."""
        if self._statuses is None:
            return
        statuses, event, names = self._statuses
        self._statuses = None
        event.synchronize()
        bad = np.flatnonzero(statuses.numpy() != 0)
        if len(bad):
            from ...errors import ShardError

            raise ShardError(f"{names[bad[0]]} does not decompress on the GPU (nvCOMP status "
                             f"{int(statuses.numpy()[bad[0]])}, {len(bad)} frames of the batch); the shard is "
                             "damaged: run `pairload verify` on the split and repack")

    def _zstd(self, stream, stored: torch.Tensor, plan, keep: list) -> tuple:
        """Decompress every frame of the plan into a scratch buffer (returned, with the frames' statuses as they
        will be on the host and the event after which they are)."""
        n = len(plan.frame_offset)
        most = int(plan.frame_bytes.max())
        temp = ctypes.c_size_t(0)
        opts = _DecompressOpts(0)
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


class _FramePlan:
    """What a decode call does: the ranges of the members' bytes staged (`runs`: (member, start, stop, staged
    at), `staged` bytes in all), then as arrays: per frame its offset and length in the staged bytes, its decoded
    size and where it is decoded to in the scratch buffer, and its member; per tile its first frame's scratch
    offset, size, predictor, channels and value size, and the byte offset of its top-left pixel in the images'
    buffer and its image's row length in bytes."""

    def __init__(self, **columns):
        self.__dict__.update(columns)


def _frame_plan(members, image_at: np.ndarray) -> _FramePlan:
    cols: dict[str, list] = {k: [] for k in ("frame_offset", "frame_length", "frame_bytes", "frame_member",
                                             "tile_h", "tile_w", "mode", "out_at", "row_bytes", "channels",
                                             "itemsize")}
    runs, staged = [], 0  # (member, start, stop, where it is staged)
    for m, (_, t, wanted) in enumerate(members):
        wanted = np.unique(np.asarray(wanted, dtype=np.int64))
        frames = (wanted[:, None] * t.planes + np.arange(t.planes)).ravel()
        # runs of consecutive tiles, whose frames lie one after another in the member
        breaks = np.flatnonzero(np.diff(wanted) != 1) + 1
        first = frames.reshape(len(wanted), t.planes)[np.concatenate([[0], breaks]), 0]
        last = frames.reshape(len(wanted), t.planes)[np.concatenate([breaks - 1, [len(wanted) - 1]]), -1]
        lo, hi = t.offsets[first], t.offsets[last] + t.lengths[last]
        at = staged + np.concatenate([[0], np.cumsum((hi - lo + 15) // 16 * 16)])
        staged = int(at[-1])
        runs += [(m, int(a), int(b), int(c)) for a, b, c in zip(lo, hi, at[:-1])]
        run_of = np.repeat(np.arange(len(lo)), np.diff(np.concatenate([[0], breaks, [len(wanted)]])) * t.planes)
        cols["frame_offset"].append(at[:-1][run_of] + t.offsets[frames] - lo[run_of])
        cols["frame_length"].append(t.lengths[frames])
        gy, gx = np.divmod(wanted, t.grid[1])
        th = np.minimum(t.tile, t.h - gy * t.tile)
        tw = np.minimum(t.tile, t.w - gx * t.tile)
        cols["frame_bytes"].append(np.repeat(th * tw, t.planes))
        cols["frame_member"].append(np.full(len(frames), m, np.int64))
        cols["tile_h"].append(th)
        cols["tile_w"].append(tw)
        cols["mode"].append(t.modes[wanted].astype(np.int64))
        pixel = t.channels * t.itemsize
        cols["out_at"].append(image_at[m] + (gy * t.tile * t.w + gx * t.tile) * pixel)
        cols["row_bytes"].append(np.full(len(wanted), t.w * pixel, np.int64))
        cols["channels"].append(np.full(len(wanted), t.channels, np.int64))
        cols["itemsize"].append(np.full(len(wanted), t.itemsize, np.int64))
    joined = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in cols.items()}
    scratch_at = np.concatenate([[0], np.cumsum(joined["frame_bytes"])[:-1]]).astype(np.int64)
    planes = joined["channels"] * joined["itemsize"]
    first_frame = np.concatenate([[0], np.cumsum(planes)[:-1]]).astype(np.int64)
    return _FramePlan(scratch_at=scratch_at, tile_at=scratch_at[first_frame] if len(first_frame) else first_frame,
                      runs=runs, staged=max(staged, 16), **joined)


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
        _untile[(len(sel),)](scratch, images, dev, CHANNELS=channels, CP=triton.next_power_of_2(channels),
                             ITEMSIZE=itemsize, BLOCK=triton.next_power_of_2(width))
        tables.append(dev)
    return tables


@triton.jit
def _untile(scratch, images, meta, CHANNELS: tl.constexpr, CP: tl.constexpr, ITEMSIZE: tl.constexpr,
            BLOCK: tl.constexpr):
    """One program per tile: row by row, each plane's row (a 16-bit value from its high and low byte planes), summed
    across and added to the row above where the tile's predictor is the gradient, the colour differences undone,
    written into the image's rows."""
    pid = tl.program_id(0)
    src = tl.load(meta + pid * 6 + 0)
    th = tl.load(meta + pid * 6 + 1)
    tw = tl.load(meta + pid * 6 + 2)
    mode = tl.load(meta + pid * 6 + 3)
    dst = tl.load(meta + pid * 6 + 4)
    row_bytes = tl.load(meta + pid * 6 + 5)
    ch = tl.arange(0, CP)[:, None]
    cols = tl.arange(0, BLOCK)[None, :]
    keep = (ch < CHANNELS) & (cols < tw)
    plane = th * tw
    top = 255 if ITEMSIZE == 1 else 65535
    acc = tl.zeros([CP, BLOCK], dtype=tl.int32)
    for r in range(0, th):
        if ITEMSIZE == 1:
            v = tl.load(scratch + src + ch * plane + r * tw + cols, mask=keep, other=0).to(tl.int32)
        else:
            hi = tl.load(scratch + src + (2 * ch) * plane + r * tw + cols, mask=keep, other=0).to(tl.int32)
            lo = tl.load(scratch + src + (2 * ch + 1) * plane + r * tw + cols, mask=keep, other=0).to(tl.int32)
            v = hi * 256 + lo
        if mode != 0:
            acc = (acc + tl.cumsum(v, axis=1)) & top
            v = acc
        if mode == 2:
            green = tl.sum(tl.where(ch == 1, v, 0), axis=0)[None, :]
            v = tl.where((ch == 0) | (ch == 2), (v + green) & top, v)
        at = dst + r * row_bytes
        if ITEMSIZE == 1:
            tl.store(images + at + cols * CHANNELS + ch, v.to(tl.uint8), mask=keep)
        else:
            wide = (images + at).to(tl.pointer_type(tl.uint16))
            tl.store(wide + cols * CHANNELS + ch, v.to(tl.uint16), mask=keep)
