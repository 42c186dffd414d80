"""The orientation executors that run on a CUDA device, for tests/test_orientation.py: the cut kernel cutting a window
under each code, and the degradation kernels' counter helper (`pairload.degrade.kernels.pixel_counter`) in a kernel of
its own. Imported only where the GPU test runs (it imports Triton)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
import triton
import triton.language as tl

from pairload.cut import kernel
from pairload.format.members import Member, Members
from pairload.degrade.kernels import pixel_counter

PAD = 16  # bytes around the stored window: the cut kernel's aligned vectors may reach 15 bytes past a row


def cut(window: np.ndarray, codes: list[int]) -> np.ndarray:
    """(n, h, w, C): the cut kernel's input side for `window` (h×w×C, stored alone as an image) under each code."""
    h, w, channels = window.shape
    member = Member(window.dtype.name, channels)
    layout = Members(member, member).batch(len(codes), h, w)
    dev = torch.device("cuda")
    pad = np.zeros(PAD, np.uint8)
    stored = torch.from_numpy(np.concatenate([pad, window.view(np.uint8).ravel(), pad])).to(dev)
    n = len(codes)
    at = torch.full((n,), stored.data_ptr() + PAD, dtype=torch.int64, device=dev)
    memory = SimpleNamespace(low=at, high=at, width=torch.full_like(at, w))
    zeros = np.zeros(n, np.int64)
    plan = torch.tensor(np.stack([np.arange(n), zeros, zeros, np.asarray(codes)]), dtype=torch.int64, device=dev)
    block = kernel.cut(memory, plan, 0, kernel.Launch.of(layout))
    low, _ = layout.views(block.cpu().numpy().reshape(-1))
    return low


@triton.jit
def _counters(out, codes, H, W, BH: tl.constexpr, BW: tl.constexpr):
    n = tl.program_id(0)
    i = tl.arange(0, BH)[:, None]
    j = tl.arange(0, BW)[None, :]
    counter, row = pixel_counter(tl.load(codes + n), i, j, H, W)
    at = out + (2 * n * H + i) * W + j
    m = (i < H) & (j < W)
    tl.store(at, counter.to(tl.int64), mask=m)
    tl.store(at + H * W, row.to(tl.int64), mask=m)


def counters(codes: list[int], h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """(counter, row), each (n, h, w): the degradation kernels' counters of h×w windows oriented by each code."""
    dev = torch.device("cuda")
    out = torch.zeros((len(codes), 2, h, w), dtype=torch.int64, device=dev)
    _counters[(len(codes),)](out, torch.tensor(codes, dtype=torch.int32, device=dev), h, w,
                             BH=triton.next_power_of_2(h), BW=triton.next_power_of_2(w))
    got = out.cpu().numpy()
    return got[:, 0], got[:, 1]
