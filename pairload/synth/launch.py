"""Launching a model's kernel (`pairload.synth.kernels`, named by the model) on a batch: its lookup table on the
device (once per device), the strides of the N×C×H×W views, uint16 members as their int16 bits."""

from __future__ import annotations

import functools

import torch

from .models import FULL, Model
from .rng import ROUNDS


@functools.lru_cache(maxsize=16)
def _lut(model: Model, dtype: str, device: str) -> torch.Tensor:
    return torch.from_numpy(model.lut(dtype)).to(device)


def triton_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16) if t.dtype == torch.uint16 else t


def launch(model: Model, extra, high: torch.Tensor, low: torch.Tensor, table: torch.Tensor, keys: torch.Tensor,
           code: torch.Tensor, apply: torch.Tensor, levels: torch.Tensor | None = None) -> None:
    """Synthesize `low` from `high` (N×C×H×W on one CUDA device) for the rows `apply` marks, on the current stream."""
    from . import kernels

    n, _, h, w = high.shape
    if n == 0:
        return
    kernel = getattr(kernels, model.kernel)
    bw = min(256, triton_pow2(w))
    br = kernels.PIXELS // bw
    grid = (n, -(-h // br), -(-w // bw))
    src, dst = _bits(high), _bits(low)
    strides = (*src.stride(), *dst.stride())
    if model.needs_levels:
        gaussian = getattr(extra, "read_dist", "tukey") == "gaussian"
        kernel[grid](src, dst, levels, table, keys, code, apply, h, w, table.stride(0), levels.stride(0), *strides,
                     GAUSSIAN=gaussian, BR=br, BW=bw, ROUNDS=ROUNDS, num_warps=kernels.WARPS)
        return
    dtype = "uint16" if high.dtype == torch.uint16 else "uint8"
    kernel[grid](src, dst, _lut(model, dtype, str(high.device)), table, keys, code, apply, h, w, table.stride(0),
                 *strides, FULL=FULL[dtype], BR=br, BW=bw, ROUNDS=ROUNDS, num_warps=kernels.WARPS)
