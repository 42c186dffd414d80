"""The batch every loader yields (`PairBatch`), the device-side augmentation step, and `Normalize`.

Batches stay uint8 until they are on the device; `Normalize` is the one place where images become float.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from .plan import HFLIP, TRANSPOSE, VFLIP


@dataclass
class PairBatch:
    """low and high: uint8 N×3×H×W tensors on the loader's device (channels_last memory layout); keys: the
    shard key of each row ("source/key" when sources are mixed); padded: bool N, True for samples repeated to fill
    the last batch (last_batch='pad'); source: the source name of each row when sources are mixed, else None."""

    low: torch.Tensor
    high: torch.Tensor
    keys: list[str]
    padded: torch.Tensor
    source: list[str] | None = None

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def valid(self) -> torch.Tensor:
        """bool N: rows that are not padding (count these, and only these, in validation metrics)."""
        return ~self.padded


def apply_codes(pixels: torch.Tensor, code: torch.Tensor | None) -> torch.Tensor:
    """Apply each sample's augmentation code to a (2, N, H, W, C) uint8 tensor: both images, one transform.

    Transpose, then vertical flip, then horizontal flip, as `pairload.plan` defines the codes. Branch-free
    (`torch.where`), so no device synchronisation happens here.
    """
    if code is None:
        return pixels
    mask = code.view(1, -1, 1, 1, 1)
    if pixels.shape[2] == pixels.shape[3]:
        pixels = torch.where((mask & TRANSPOSE) != 0, pixels.transpose(2, 3), pixels)
    pixels = torch.where((mask & VFLIP) != 0, pixels.flip(2), pixels)
    return torch.where((mask & HFLIP) != 0, pixels.flip(3), pixels)


def make_batch(pixels: torch.Tensor, code: torch.Tensor | None, keys: Sequence[str], padded: torch.Tensor,
               source: list[str] | None = None) -> PairBatch:
    """(2, N, H, W, 3) uint8 on the device → augmented PairBatch with N×3×H×W views (no copy for the layout change)."""
    out = apply_codes(pixels, code).permute(0, 1, 4, 2, 3)
    return PairBatch(low=out[0], high=out[1], keys=list(keys), padded=padded, source=source)


def batch_from_hwc(low: torch.Tensor, high: torch.Tensor, keys: Sequence[str], padded: torch.Tensor,
                   source: list[str] | None = None) -> PairBatch:
    """Already augmented N×H×W×3 tensors (as DALI delivers them) → PairBatch with N×3×H×W views."""
    return PairBatch(low=low.permute(0, 3, 1, 2), high=high.permute(0, 3, 1, 2), keys=list(keys), padded=padded,
                     source=source)


class Normalize(nn.Module):
    """uint8 N×C×H×W on the device → float, `(x - 255·mean) / (255·std)`; optionally channels_last.

    Mean and std are given for images in [0, 1] and pre-scaled by 255, so the conversion is one fused pass.
    """

    def __init__(self, mean: Sequence[float] = (0.0, 0.0, 0.0), std: Sequence[float] = (1.0, 1.0, 1.0), *,
                 channels_last: bool = False, dtype: torch.dtype = torch.float32):
        super().__init__()
        if len(mean) != len(std) or any(s <= 0 for s in std):
            raise ValueError(f"Normalize: mean {tuple(mean)} and std {tuple(std)} need one positive std per channel")
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1) * 255.0, persistent=False)
        self.register_buffer("inv_std", 1.0 / (torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1) * 255.0),
                             persistent=False)
        self.channels_last = channels_last
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.uint8:
            raise TypeError(f"Normalize expects uint8 images, got {x.dtype}: normalise once, on the device")
        fmt = torch.channels_last if self.channels_last else torch.contiguous_format
        out = (x.to(self.dtype) - self.mean.to(self.dtype)) * self.inv_std.to(self.dtype)
        return out.contiguous(memory_format=fmt)

    def denormalize(self, y: torch.Tensor) -> torch.Tensor:
        """float in the normalised space → float in [0, 1] (for metrics and pictures)."""
        return (y.float() / self.inv_std + self.mean) / 255.0
