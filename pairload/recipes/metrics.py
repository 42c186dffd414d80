"""Image-quality metrics computed on the device, per image, for images in [0, 1]: PSNR and SSIM."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def psnr(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-image PSNR in dB (N,), for N×C×H×W tensors in [0, 1]; pred is clamped to [0, 1]."""
    mse = (pred.float().clamp(0, 1) - target.float()).pow(2).flatten(1).mean(1)
    return 10 * torch.log10(1.0 / mse.clamp_min(1e-10))


def _gauss(size: int, sigma: float, channels: int, device) -> torch.Tensor:
    x = torch.arange(size, device=device, dtype=torch.float32) - (size - 1) / 2
    g = torch.exp(-(x ** 2) / (2 * sigma ** 2))
    g = (g / g.sum())
    return (g[:, None] * g[None, :]).expand(channels, 1, size, size).contiguous()


def ssim(pred: torch.Tensor, target: torch.Tensor, *, size: int = 11, sigma: float = 1.5) -> torch.Tensor:
    """Per-image SSIM (N,) with an 11×11 Gaussian window (σ = 1.5), averaged over channels and valid positions."""
    x, y = pred.float().clamp(0, 1), target.float()
    c = x.shape[1]
    w = _gauss(size, sigma, c, x.device)
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    mx, my = F.conv2d(x, w, groups=c), F.conv2d(y, w, groups=c)
    sxx = F.conv2d(x * x, w, groups=c) - mx * mx
    syy = F.conv2d(y * y, w, groups=c) - my * my
    sxy = F.conv2d(x * y, w, groups=c) - mx * my
    s = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx * mx + my * my + c1) * (sxx + syy + c2))
    return s.flatten(1).mean(1)
