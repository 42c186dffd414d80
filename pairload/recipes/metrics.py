"""The SSIM of the reference loop's loss (`--ssim-weight`): differentiable, float32, on the device.

It is the formula of the paper-style `pairload.evaluate.ssim` (BasicSR's window, constants and valid positions),
without the 8-bit rounding and float64 that evaluation uses: rounding has no gradient, and float64 would slow every
training step. Validation reports `pairload.evaluate`'s metrics (`recipes.evaluate`)."""

from __future__ import annotations

import torch

from ..evaluate.metrics import PEAK, ssim_of


def ssim(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-image SSIM (N,) of N×C×H×W float images in [0, 1] (pred clamped to [0, 1]), averaged over channels and
    valid positions of the 11×11 Gaussian window (σ 1.5)."""
    return ssim_of(pred.float().clamp(0, 1) * PEAK, target.float() * PEAK, "the SSIM loss")
