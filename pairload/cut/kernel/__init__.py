"""The device cut's launch geometry: a run's plan as one device tensor (`plan_tensor`), each batch's window shape
(`out_shapes`), what a launch for one batch shape needs (`Launch`), and `cut`, which launches the kernel
(`rows.cut_rows`, built by Triton on first use). Torch only here; Triton is imported with the kernel."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...format.members import BatchLayout
from ...plan import BatchPlan
from ...plan.crops import crop_size

MAX_WORDS = 256  # 4-byte words of a row one program step reads at most (a crop of 256 RGB pixels is 192)
WARPS = 2


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

    @staticmethod
    def of(layout: BatchLayout, scale: int = 1) -> "Launch":
        n, h, w, _ = layout.low_shape
        pix_low, pix_high = layout.low.pixel_bytes, layout.high.pixel_bytes
        widest = max(w * pix_low, w * scale * pix_high)
        words = min(MAX_WORDS, 1 << ((widest + 15) // 4).bit_length())
        shape = layout.stacked_shape if layout.stacked and layout.low.dtype == "uint8" else (layout.total,)
        return Launch(layout, scale, shape, (n * h * scale, 2), words, pix_low, pix_high)


_kernel = None
_anchors: dict = {}


def _anchor(device: torch.device) -> torch.Tensor:
    """The int32 tensor the kernel addresses its words from (one per device; its address is 16-byte aligned, as
    every allocation of torch's caching allocator is)."""
    anchor = _anchors.get(device)
    if anchor is None:
        anchor = _anchors[device] = torch.zeros(4, dtype=torch.int32, device=device)
    return anchor


def cut(memory, plan: torch.Tensor, start: int, launch: Launch, out: torch.Tensor | None = None, *,
        inputs: bool = True) -> torch.Tensor:
    """The block (laid out by `launch.layout`; a stacked uint8 layout as its (2, n, h, w, C) tensor) of the windows in
    columns start..start+n of `plan` (`plan_tensor`), cut from `memory` (a `pairload.cut.memory.Memory`) on the
    current stream. `inputs` False: the targets only (the input block is left as it is, for the degrade stage to
    fill)."""
    if out is None:
        out = torch.empty(launch.out_shape, dtype=torch.uint8, device=plan.device)
    if launch.layout.low_shape[0]:
        grid, args, meta = _arguments(memory, plan, start, launch, out, inputs)
        _rows()[grid](*args, **meta)
    return out


def build(memory, plan: torch.Tensor, start: int, launch: Launch, out: torch.Tensor, *, inputs: bool = True) -> None:
    """Build the kernel that `cut` of these arguments launches, without launching it (Triton's `warmup`), on the
    calling thread's current device: a process's first build takes about half a second (Triton hashes its own files
    for its cache key), which a thread can spend while the loader waits for something else. A failure is left for
    `cut` to raise."""
    try:
        grid, args, meta = _arguments(memory, plan, start, launch, out, inputs)
        _rows().warmup(*args, grid=grid, **meta)
    except Exception:  # noqa: BLE001 - the launch builds it again and says why it cannot
        pass


def _rows():
    global _kernel
    if _kernel is None:
        from .rows import cut_rows

        _kernel = cut_rows
    return _kernel


def _arguments(memory, plan: torch.Tensor, start: int, launch: Launch, out: torch.Tensor, inputs: bool) -> tuple:
    """`cut_rows`'s grid, arguments and meta-parameters."""
    n, h, w, _ = launch.layout.low_shape
    anchor = _anchor(out.device)
    grid = launch.grid if inputs else (launch.grid[0], 1)
    return grid, (out, anchor, anchor.data_ptr(), memory.low, memory.high, memory.width, plan, start, plan.shape[1],
                  n, h, w, launch.layout.high_offset), dict(
        WORDS=launch.words, PIX_LOW=launch.pix_low, PIX_HIGH=launch.pix_high, SCALE=launch.scale,
        FIRST_SIDE=0 if inputs else 1, num_warps=WARPS)
