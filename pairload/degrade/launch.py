"""Launching a model's kernel (`pairload.degrade.kernels`, named by the model) on a block: its lookup table on the
device (once per device and type), (N, H, W, C) sides, uint16 members as their int16 bits. Kept short: it runs once
per block on the loading thread."""

from __future__ import annotations

import torch

from .models import FULL, Model
from .rng import ROUNDS

_PREPARED: dict[tuple, tuple] = {}  # (model, dtype, device) → (kernel, lookup table or None, FULL, kernels)


def _prepared(model: Model, dtype: torch.dtype, device: torch.device) -> tuple:
    key = (model.name, dtype, device)
    got = _PREPARED.get(key)
    if got is None:
        from . import kernels

        name = "uint16" if dtype == torch.uint16 else "uint8"
        table = model.lut(name)
        got = (getattr(kernels, model.kernel), None if table is None else torch.from_numpy(table).to(device),
               FULL[name], kernels)
        _PREPARED[key] = got
    return got


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def launch(model: Model, extra, high: torch.Tensor, low: torch.Tensor, table: torch.Tensor, keys: torch.Tensor,
           code: torch.Tensor, apply: torch.Tensor, levels: torch.Tensor | None = None) -> None:
    """Degrade `high` into `low` ((N, H, W, C), both contiguous, on one CUDA device) for the rows `apply` marks, on
    the current stream. Few arguments: the launch's own cost is most of a small batch's."""
    n, h, w, c = high.shape
    if n == 0:
        return
    kernel, lut, full, kernels = _prepared(model, high.dtype, high.device)
    if high.dtype == torch.uint16:
        high, low = high.view(torch.int16), low.view(torch.int16)
    if lut is None:  # raw: a program per output row
        kernel[(n, h)](high, low, levels, table, keys, code, apply, h, w, C=c, TS=table.shape[1],
                       GAUSSIAN=getattr(extra, "read_dist", "tukey") == "gaussian", BW=kernels.RAW_STEP, ROUNDS=ROUNDS,
                       num_warps=kernels.RAW_WARPS)
        return
    pixels, warps = kernels.SHAPE[model.kernel]
    bw = min(256, _pow2(w))
    br = max(1, pixels // bw)
    grid = (n, -(-h // br), -(-w // bw))
    kernel[grid](high, low, lut, table, keys, code, apply, h, w, C=c, TS=table.shape[1], FULL=full, BR=br, BW=bw,
                 ROUNDS=ROUNDS, num_warps=warps)
