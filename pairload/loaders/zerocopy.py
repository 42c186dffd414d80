"""Zero-copy crops on a CUDA device: the GPU cuts each planned window straight out of the page cache.

The shard files of the split are memory-mapped read-only (the maps every worker of `ram` would use, so the node
still holds one copy of the split) and registered with the device piece by piece as the plan reads them
(`pins.Pins`: read-only and mapped, the page-cache pages pinned, the GPU reading them over PCIe through unified
addressing). One Triton kernel then writes every planned window of a batch, both images and the planned
transpose/flips applied in the same pass, into the batch tensor on the loader's side stream. No worker process and
no host copy is involved; the planner still decides every window and orientation, so the batches equal the worker
path's bit for bit. `wds` uses it too: its split stays registered when it fits the pinning budget, else a window of
shards is registered at a time (`streaming`).

`resident=True` uses the same kernel: the shard files are copied once into device memory and the kernel reads
them there (`DeviceCopy`).

When it is not used (`decide` says why, in one line): a CPU device; a compressed split (its frames are decoded in
workers); no Triton in this torch install; a split (or, streaming, a window and the next) larger than the pinning
budget (default half of the memory available); a registration the driver refuses, or a kernel Triton cannot build
or that reads other bytes than the CPU (`self_test`; the error is named). The worker path then runs as before.

Pinned pages cannot be evicted or moved while they are registered, and a shard truncated or replaced on disk does
not change what the GPU reads (the pinned pages are the pack as it was when the loader opened it): the loader checks
the files every `pins.CHECK_S` seconds and stops with a named error, so batches never mix two packs and no SIGBUS can
happen (the CPU never touches the maps on this path).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from ..batch import sides_of
from ..dihedral import HFLIP, TRANSPOSE, VFLIP
from ..format.members import BatchLayout
from ..errors import ConfigError, PairloadError
from ..units import human_bytes
from ..plan import BatchPlan
from ..plan.crops import crop_size
from . import tiles
from .cut import Cut
from .pins import Pins, _DriverError, sample_offsets
from .resident import check_room

BUDGET_FRACTION = 0.5  # default pinning budget: this fraction of the memory available when the loader starts


@dataclass(frozen=True)
class Decision:
    """Whether a loader cuts its crops on the device (`use`), and if not, why (`why`: one line; '' when the
    path was never a candidate, e.g. a CPU device)."""

    use: bool
    why: str = ""


def default_budget() -> int:
    """Bytes of shard files the zero-copy path may pin by default: half of the memory available now."""
    import psutil

    return int(BUDGET_FRACTION * psutil.virtual_memory().available)


def triton_missing() -> str | None:
    """Why Triton cannot run here (None: it can)."""
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means: not available
        return f"Triton is not importable ({type(exc).__name__}: {exc}); it ships with CUDA builds of torch"
    return None


def decide(ds, device: torch.device, *, requested: bool | None, budget: int | None, resident: bool = False,
           need: int | None = None) -> Decision:
    """Use the zero-copy path for `ds` on `device`? `requested`: True (must: refuse with a ConfigError if it
    cannot), False (never), None (when it can, else the worker path with the reason). `budget`: bytes of shard
    files that may be pinned (None: `default_budget()`); not used for `resident` (the device holds the copy).
    `need`: the bytes pinned at once at most (a streamed split's window and what is read ahead; None: the whole
    split)."""
    if requested is False:
        return Decision(False)
    why = _why_not(ds, device, budget, resident, need)
    if why is None:
        return Decision(True)
    if requested:
        raise _refused(why)
    return Decision(False, "" if device.type != "cuda" else why)


def _refused(why: str) -> ConfigError:
    return ConfigError(f"zero_copy=True: {why}; leave zero_copy unset to fall back to the worker path")


def _why_not(ds, device: torch.device, budget: int | None, resident: bool, need: int | None) -> str | None:
    if device.type != "cuda":
        return f"device {device} is not a CUDA device (the GPU kernel reads the page cache over PCIe)"
    if any(part.index.compression for part in _parts(ds)):
        return ("the split is compressed (pack --compress zstd): its images are decoded by CPU workers; repack "
                "without --compress for the zero-copy path")
    if not resident:
        budget = default_budget() if budget is None else budget
        if need is None and sum(ds.shard_bytes) > budget:
            return (f"the split's shards are {human_bytes(sum(ds.shard_bytes))}, more than the pinning budget of "
                    f"{human_bytes(budget)} (pin_budget=; default half of the memory available)")
        if need is not None and need > budget:
            return (f"a shuffle window of shards and the next one are {human_bytes(need)}, more than the pinning "
                    f"budget of {human_bytes(budget)} (pin_budget=, or a smaller shuffle_buffer)")
    return triton_missing()


def _parts(ds) -> list:
    """The plain `ShardDataset`s behind `ds` (a `ShardMix`'s sources, in order)."""
    return ds.sources


# ---------------------------------------------------------------------------------------------- registration


def register(ds, device: torch.device, *, budget: int | None, streaming: bool, ahead: int | None = None
             ) -> tuple[Pins | None, str]:
    """(pins, '') or (None, why): the shard maps registered piece by piece as the plan reads them (`pins.Pins`). A
    driver that cannot do it (an old libcuda) is a reason to fall back, not an error; a refused registration shows in
    the self-test."""
    try:
        return Pins(ds, device, budget=default_budget() if budget is None else budget, streaming=streaming,
                    ahead=ahead), ""
    except (OSError, AttributeError, _DriverError) as exc:
        return None, f"the CUDA driver cannot register the page cache here ({exc})"


class DeviceCopy:
    """`resident=True`: every shard file copied once into device memory; `low`/`high`: each sample's device address
    there, `width`: its width (the tables `pins.Pins` keeps for the page cache)."""

    streaming = False

    def __init__(self, ds, device: torch.device):
        need = sum(ds.shard_bytes)
        check_room(ds, need, device)
        self.ds, self.device = ds, device
        self.store = torch.empty(need, dtype=torch.uint8, device=device)
        self._filled = 0
        base = np.array([self._copy(part, number, size) for part in _parts(ds)
                         for number, size in enumerate(part.shard_bytes)], dtype=np.int64)
        shard, low, high = sample_offsets(ds)
        self.low = torch.from_numpy(base[shard] + low).to(device)
        self.high = torch.from_numpy(base[shard] + high).to(device)
        self.width = torch.from_numpy(np.ascontiguousarray(ds.sizes[:, 1], dtype=np.int64)).to(device)

    def _copy(self, part, number: int, size: int) -> int:
        start, self._filled = self._filled, self._filled + size
        with warnings.catch_warnings():  # the map is read-only and only read here
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            self.store[start:start + size].copy_(torch.from_numpy(part.shard_map(number)))
        return self.store.data_ptr() + start

    def check(self, force: bool = False) -> None:
        """The device holds its own copy: changes on disk cannot reach it."""

    def begin(self, plans) -> None:
        """Everything is on the device already (as are `wait`, `done`, `reap`, `warm`: nothing to do)."""

    def wait(self, b: int) -> None:
        pass

    def settle(self, stream) -> None:
        pass

    def done(self, b: int, event) -> None:
        pass

    def reap(self, block: bool = False) -> None:
        pass

    def warm(self, samples) -> None:
        pass

    @property
    def closed(self) -> bool:
        return self.store is None

    def close(self) -> None:
        self.store = None


# ---------------------------------------------------------------------------------------------- the kernel

_kernel = None
_HF = _VF = _TR = _window = None  # the orientation bits as Triton constants and `kernel_plan.window`: _build_kernel


def _build_kernel():
    import triton
    import triton.language as tl

    from .kernel_plan import window

    # the orientation bits (`pairload.dihedral`) as compile-time constants the kernel reads as globals
    globals().update(_HF=tl.constexpr(HFLIP), _VF=tl.constexpr(VFLIP), _TR=tl.constexpr(TRANSPOSE), _window=window)

    @triton.jit
    def cut(out_ptr, anchor, anchor_addr, low_addr, high_addr, width, plan, start, total, n, h, w, high_offset,
            WORDS: tl.constexpr, PIX_LOW: tl.constexpr, PIX_HIGH: tl.constexpr, SCALE: tl.constexpr):
        """One program per (window row r of sample j, side): read the row's bytes (contiguous in the shard) and
        write them where the planned orientation puts them in the side's (n, rows, cols, C) block of `out_ptr`
        (the input block at byte 0, the target block at `high_offset`). A side's pixel is PIX_LOW or PIX_HIGH bytes;
        the target is SCALE times the input's height and width (its window at SCALE times the input's corner).
        The row is read as 16-byte aligned vectors of 4-byte words (each thread asks for 16 contiguous bytes: 1.04-
        1.09x the 4-byte loads over PCIe on the H100, and those were 1.2x single bytes), CHUNK bytes at a time, and its
        bytes picked out of them (`tl.gather`). The words are addressed from `anchor` (an int32 device tensor at the
        16-byte aligned address `anchor_addr`) so that Triton knows their alignment and issues vector loads.
        `plan`: int64 (4, total) rows index, y, x, code of a run's samples; this batch is columns start..start+n."""
        CHUNK: tl.constexpr = 4 * WORDS - 16
        row = tl.program_id(0)
        side = tl.program_id(1)
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
        base, src_w, y, x, code = _window(plan, start, tl.minimum(j, n - 1), total, side, low_addr, high_addr, width)
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
        hflip = (code & _HF) != 0
        vflip = (code & _VF) != 0
        transpose = (code & _TR) != 0
        row_out = tl.where(vflip, hs - 1 - r, r)
        col_out = tl.where(hflip, ws - 1 - r, r)
        plane = j.to(tl.int64) * hs
        dst = out_ptr + tl.where(side == 0, 0, high_offset)
        for c0 in range(0, ws * pix, CHUNK):
            first = tl.multiple_of(word0 + c0 // 4, 4)
            words = tl.load(anchor + first + m, mask=m < tl.multiple_of(nwords - c0 // 4, 4))
            stream = tl.reshape((words[:, None] >> (tl.arange(0, 4) * 8)[None, :]) & 0xFF, [4 * WORDS])
            px = tl.gather(stream, tl.minimum(k0 + shift, 4 * WORDS - 1), axis=0).to(tl.uint8)
            k = c0 + k0
            mask = (k0 < CHUNK) & (k < row_bytes)
            c = k // pix
            # not transposed: out[i, jj] = window[r, c], i = r (vflip: rows-1-r), jj = c (hflip: cols-1-c)
            # transposed (square): out[i, jj] = window[jj', i'] with jj' = r, i' = c, then the same flips
            oi = tl.where(transpose, tl.where(vflip, hs - 1 - c, c), row_out)
            oj = tl.where(transpose, col_out, tl.where(hflip, ws - 1 - c, c))
            tl.store(dst + ((plane + oi) * ws + oj) * pix + k % pix, px, mask=mask)

    return cut


def plan_tensor(plans: list[BatchPlan], device: torch.device, augment: bool) -> torch.Tensor:
    """A run's windows as one int64 (4, samples) device tensor: index, y, x, code (0 without `augment`), copied on
    the current stream from page-locked memory (a copy from pageable memory would make this thread wait for every
    kernel queued on the stream)."""
    rows = np.empty((4, sum(len(bp) for bp in plans)), dtype=np.int64)
    for k, name in enumerate(("index", "y", "x", "code") if augment else ("index", "y", "x")):
        np.concatenate([getattr(bp, name) for bp in plans], out=rows[k])
    if not augment:
        rows[3] = 0
    host = torch.from_numpy(rows)
    if device.type == "cuda":
        host = host.pin_memory()
    return host.to(device, non_blocking=True)


def out_shapes(plans: list[BatchPlan], hw: np.ndarray) -> list[tuple[int, int]]:
    """Each planned batch's window height and width (one crop for every batch of a run: worked out once)."""
    size = crop_size(plans[0].crop)
    if size is not None and all(bp.crop == plans[0].crop for bp in plans):
        return [size] * len(plans)
    return [bp.out_hw(hw) for bp in plans]


@dataclass(frozen=True)
class Launch:
    """What one kernel launch for a batch layout needs besides the plan, worked out once per shape."""

    layout: BatchLayout
    scale: int
    out_shape: tuple  # the block's shape: (2, n, h, w, C) for a stacked uint8 layout, else its bytes
    grid: tuple[int, int]
    words: int
    pix_low: int  # bytes of one input pixel, and of one target pixel
    pix_high: int
    tiles: bool  # a device copy of these windows may be cut by tiles (`tiles.applies`)

    @staticmethod
    def of(layout: BatchLayout, scale: int = 1) -> "Launch":
        n, h, w, _ = layout.low_shape
        pix_low, pix_high = layout.low.pixel_bytes, layout.high.pixel_bytes
        widest = max(w * pix_low, w * scale * pix_high)
        # up to 1008 bytes of a row per step (crop 256 rows of RGB are 768): 256 words, 2 warps (fastest on the
        # H100, benchmarks/zerocopy_bound.py)
        words = min(256, 1 << ((widest + 15) // 4).bit_length())
        shape = layout.stacked_shape if layout.stacked and layout.low.dtype == "uint8" else (layout.total,)
        return Launch(layout, scale, shape, (n * h * scale, 2), words, pix_low, pix_high, tiles.applies(layout, scale))


def cut(source, plan: torch.Tensor, start: int, layout: BatchLayout | Launch, scale: int = 1,
        out: torch.Tensor | None = None, tiled: bool | None = None) -> torch.Tensor:
    """The block (laid out by `layout`, `members.BatchLayout`; a stacked uint8 layout as its (2, n, h, w, C) tensor)
    of the windows in columns start..start+n of `plan` (`plan_tensor`), cut from `source` (a `pins.Pins` or
    `DeviceCopy`) on the current stream. `layout` may be a `Launch` worked out before (per batch shape). `tiled`:
    cut a device copy by tiles (`tiles`; None: where it applies), else by rows (what the page cache is cut by)."""
    global _kernel
    launch = layout if isinstance(layout, Launch) else Launch.of(layout, scale)
    lay = launch.layout
    if out is None:
        out = torch.empty(launch.out_shape, dtype=torch.uint8, device=plan.device)
    n, h, w, _ = lay.low_shape
    if tiled is None:
        tiled = launch.tiles and isinstance(source, DeviceCopy)
    if n and tiled:
        tiles.cut(out, _anchor(out.device), source, plan, start, n, h, w, lay.high_offset)
    elif n:
        if _kernel is None:
            _kernel = _build_kernel()
        anchor = _anchor(out.device)
        _kernel[launch.grid](out, anchor, anchor.data_ptr(), source.low, source.high, source.width, plan, start,
                             plan.shape[1], n, h, w, lay.high_offset, WORDS=launch.words, PIX_LOW=launch.pix_low,
                             PIX_HIGH=launch.pix_high, SCALE=launch.scale, num_warps=2)
    return out


_anchors: dict = {}


def _anchor(device: torch.device) -> torch.Tensor:
    """The int32 tensor the kernel addresses its words from (one per device; its address is 16-byte aligned, as
    every allocation of torch's caching allocator is)."""
    anchor = _anchors.get(device)
    if anchor is None:
        anchor = _anchors[device] = torch.zeros(4, dtype=torch.int32, device=device)
    return anchor


class KernelCuts:
    """The `zero-copy` and `resident` cutters: planned batches cut by `cut` on a side stream of their own, each
    `Cut` a device block with the event that marks it ready. `group` > 1: up to that many consecutive batches of one
    shape are cut by one launch (a launch costs ~50 us of Python), each batch's block a slice of it sharing the
    group's event (DALI's feed uses this)."""

    on_device = True

    def __init__(self, memory, device: torch.device, path: str = "zero-copy"):
        """`memory`: what the kernel reads, the shard maps registered piece by piece (`pins.Pins`) or the split's
        device copy (`DeviceCopy`)."""
        self.memory, self.device, self.path = memory, device, path
        self.members = memory.ds.members
        self.stream = torch.cuda.Stream(device)
        self._launches: dict[tuple[int, int, int], Launch] = {}  # per (n, h, w): worked out once

    def _launch(self, n: int, h: int, w: int) -> Launch:
        launch = self._launches.get((n, h, w))
        if launch is None:
            launch = self._launches[(n, h, w)] = Launch.of(self.members.batch(n, h, w), self.members.scale)
        return launch

    def start(self) -> None:
        """Nothing to start: no worker processes."""

    def worker_pids(self) -> list[int]:
        return []

    def cuts(self, run: tuple, plans: list[BatchPlan], reclaim=None, *, augment: bool = True, hw=None,
             events: bool = True, group: int = 1, settle: bool = True):
        """A `Cut` per plan, each cut on `self.stream` with the event that marks it ready (`events`; a streamed
        split records them anyway: its pieces go back once their last batch is done); `group` > 1: up to that many
        batches of one shape per launch. `settle`: first register a split that stays registered again shard by
        shard (`settle`); False when the run is cut ahead of its use (the next epoch while this one ends)."""
        if not plans:
            return
        hw = self.memory.ds.sizes if hw is None else hw
        self._reopen()
        self.memory.check(force=True)
        if self.memory.streaming:
            self.stream.synchronize()  # what the last run left pinned may go back now
        elif settle:
            self.settle()
        self.memory.begin(plans)
        events = events or self.memory.streaming
        if self.memory.streaming:  # a group's batches are pinned at once: a streamed window keeps one at a time
            group = 1
        with torch.cuda.stream(self.stream):  # the whole run's plan goes to the device in one copy
            plan = plan_tensor(plans, self.device, augment)
        shapes = out_shapes(plans, hw)
        start, b = 0, 0
        while b < len(plans):
            self.memory.check()
            h, w = shapes[b]
            n = len(plans[b])
            k = 1
            while k < group and b + k < len(plans) and len(plans[b + k]) == n and shapes[b + k] == (h, w):
                k += 1
            launch = self._launch(n, h, w)
            layout = launch.layout
            together = launch if k == 1 else self._launch(k * n, h, w)
            with torch.cuda.stream(self.stream):
                for j in range(k):  # every piece of the page cache these batches read is registered
                    self.memory.wait(b + j)
                block = cut(self.memory, plan, start, together)
                ready = None
                if events:
                    ready = torch.cuda.Event()
                    ready.record(self.stream)
            for j in range(k):
                self.memory.done(b + j, ready)
            # each batch's sides are views of the group's block, made for the whole group at once (a few tensor
            # operations per launch, none per batch: at a million pairs a second a batch has ~30 us in all)
            low, high = (block[0], block[1]) if block.dim() == 5 else sides_of(together.layout, block)
            whole = (low, high)
            lows, highs = low.permute(0, 3, 1, 2).split(n), high.permute(0, 3, 1, 2).split(n)
            for j in range(k):
                yield Cut(plans[b + j], layout, None, True, ready, nchw=(lows[j], highs[j]), group=whole)
            start += k * n
            b += k

    def settle(self) -> None:
        """Register the shards read whole by now again as one range each (`Pins.settle`: ~0.1 s after a split was
        read cold, then nothing), once the kernels reading their pieces are done."""
        if not self.memory.streaming:
            self.memory.settle(self.stream)

    def _reopen(self) -> None:
        """After `close()`: register the shards (or copy them to the device) again."""
        if not self.memory.closed:
            return
        if isinstance(self.memory, DeviceCopy):
            self.memory = DeviceCopy(self.memory.ds, self.device)
            return
        old = self.memory
        self.memory = Pins(old.ds, self.device, budget=old.budget, streaming=old.streaming, ahead=old.ahead)

    def close(self) -> None:
        """Unpin the pages (or free the device copy) once the kernels reading them are done; the next run registers
        them again."""
        self.stream.synchronize()
        self.memory.close()


def self_test(source, ds, device: torch.device) -> str:
    """Cut the first sample's window once on the device and compare it with the CPU's slice: '' when they are equal,
    else why the path cannot be used (Triton could not build or launch the kernel, e.g. without a C compiler, or
    the device read other bytes than the CPU)."""
    h, w = (int(v) for v in ds.sizes[0])
    ch, cw = min(h, 8), min(w, 8)
    plan = torch.tensor([[0], [h - ch], [w - cw], [0]], dtype=torch.int64, device=device)
    members = ds.members
    layout = members.batch(1, ch, cw)
    try:
        source.warm([0])
    except PairloadError as exc:
        return f"registering the first shard failed ({exc})"
    try:
        got = layout.views(cut(source, plan, 0, layout, members.scale).cpu().numpy().reshape(-1))
    except Exception as exc:  # noqa: BLE001 - any failure to build or run the kernel means: not here
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        return f"the GPU kernel could not be built or run ({type(exc).__name__}: {first})"
    low, high = ds.arrays(0)  # read by the CPU after the device: a failure above never touched the map
    s = members.scale
    if not (np.array_equal(got[0][0], low[h - ch:, w - cw:])
            and np.array_equal(got[1][0], high[(h - ch) * s:, (w - cw) * s:])):
        return (f"the GPU read other bytes than the CPU for {ds.keys[0]} (a driver that maps registered memory "
                "elsewhere)")
    return ""


def setup(ds, device: torch.device, *, requested: bool | None, budget: int | None, resident: bool = False,
          streaming: bool = False, need: int | None = None, ahead: int | None = None, who: str = "ram",
          stacklevel: int = 4) -> tuple[Pins | DeviceCopy | None, str]:
    """What a loader's GPU kernel reads (the shard maps, registered as the plan reads them, or with `resident` a
    device copy), or None and why not: refused with a ConfigError when `requested` is True, else a one-line warning
    naming the reason (none on a CPU device, where the path was never a candidate). `streaming`, `need`, `ahead`: a
    split read a window at a time (`pins.Pins`, `decide`)."""
    if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0):
        raise ConfigError(f"pin_budget={budget!r}: expected a positive number of bytes")
    decision = decide(ds, device, requested=requested, budget=budget, resident=resident, need=need)
    source, why = None, decision.why
    if decision.use:
        source, why = (DeviceCopy(ds, device), "") if resident else register(ds, device, budget=budget,
                                                                             streaming=streaming, ahead=ahead)
        if source is not None:
            why = self_test(source, ds, device)
            if why:
                source.close()
                source = None
        if source is None and requested:
            raise _refused(why)
    if why and not resident:
        warnings.warn(f"{who} loader: the workers cut the crops (not the GPU from the page cache): {why}",
                      stacklevel=stacklevel)
    return source, why
