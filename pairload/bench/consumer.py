"""The optional consumer (`--consumer unet`): a training step of the reference model fed each delivered batch,
and the rate that step alone reaches on one resident batch (what the GPU can absorb without any loading)."""

from __future__ import annotations

import contextlib
import time
from typing import Callable

import torch

from .bounds import sync


def make_consumer(device: torch.device, crop: int) -> Callable:
    """A training step of the reference model (bf16 autocast on CUDA) that takes (low, high) uint8 or float."""
    from ..batch import Normalize
    from ..recipes.model import EnhanceUNet

    model = EnhanceUNet().to(device)
    norm = Normalize().to(device)
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def amp():
        return torch.autocast(device.type, dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()

    def step(low: torch.Tensor, high: torch.Tensor) -> None:
        x = norm(low) if low.dtype == torch.uint8 else low
        y = norm(high) if high.dtype == torch.uint8 else high
        if device.type == "cuda":
            x = x.contiguous(memory_format=torch.channels_last)
        with amp():
            loss = (model(x) - y).abs().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def consumer_rate(consumer: Callable, device: torch.device, batch_size: int, crop: int) -> float:
    """Training steps per second on one resident batch, as pairs/s."""
    low = torch.randint(0, 256, (batch_size, 3, crop, crop), dtype=torch.uint8, device=device)
    for _ in range(3):
        consumer(low, low)
    sync(device)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 2.0:
        consumer(low, low)
        n += 1
    sync(device)
    return n * batch_size / (time.perf_counter() - t0)
