"""Launching the degradation kernels (`pairload.synth.kernels`) on a batch: the lookup tables on the device (once
per device), the strides of the N×C×H×W views, uint16 members as their int16 bits."""

from __future__ import annotations

import functools

import torch

from .models import FULL
from .models.srgb import to_linear
from .models.unprocess import to_camera_light
from .rng import ROUNDS

LUTS = {"lowlight": to_linear, "unprocess": to_camera_light}


@functools.lru_cache(maxsize=16)
def _lut(model: str, dtype: str, device: str) -> torch.Tensor:
    return torch.from_numpy(LUTS[model](dtype)).to(device)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16) if t.dtype == torch.uint16 else t


def launch(degrade, high: torch.Tensor, low: torch.Tensor, table, keys, code, apply, levels) -> None:
    from . import kernels

    n, _, h, w = high.shape
    if n == 0:
        return
    dtype = "uint16" if high.dtype == torch.uint16 else "uint8"
    grid = (n, -(-h * w // kernels.BLOCK))
    src, dst = _bits(high), _bits(low)
    common = (table, keys, code, apply, h, w, table.stride(0), *src.stride(), *dst.stride())
    if degrade.model == "raw-physics":
        gaussian = getattr(degrade.extra, "read_dist", "tukey") == "gaussian"
        kernels.raw_kernel[grid](src, dst, levels, table, keys, code, apply, h, w, table.stride(0), levels.stride(0),
                                 *src.stride(), *dst.stride(), GAUSSIAN=gaussian, BLOCK=kernels.BLOCK, ROUNDS=ROUNDS)
        return
    kernel = kernels.lowlight_kernel if degrade.model == "lowlight" else kernels.unprocess_kernel
    lut = _lut(degrade.model, dtype, str(high.device))
    kernel[grid](src, dst, lut, *common, FULL=FULL[dtype], BLOCK=kernels.BLOCK, ROUNDS=ROUNDS)
