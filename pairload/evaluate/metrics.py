"""PSNR, SSIM and GT-mean PSNR as low-light papers report them, on torch tensors on any device.

This module owns the metric functions, their options (`MetricConfig`) and the conversions they share: the 8-bit
rounding, the border crop and the Y channel. The formulas are those of BasicSR's `calculate_psnr` and
`calculate_ssim` (`basicsr/metrics/psnr_ssim.py`), which Restormer, Retinexformer and most low-light repositories
copy. The GT-mean variant is that of Retinexformer's `Enhancement/test_from_dataset.py --GT_mean`, after KinD and
LLFlow. `docs/evaluation.md` describes them and how closely they agree.

Inputs are N×C×H×W tensors: floats in [0, 1] (clamped to [0, 1] first, as BasicSR's `tensor2img` and the test
scripts do), or uint8 levels. Floats further than 0.5 outside [0, 1] are on another scale and refused, as are NaN and
inf (`checks`). Everything is computed in float64 on the 0-255 scale, and every function
returns one float64 value per image, a tensor of N on the inputs' device.

With `quantize=True` (the default) the images are rounded to 8 bits first, as `tensor2img` does before BasicSR's
validation computes its metrics: in float32, clamp to [0, 1], multiply by 255, round half to even.
`quantize=False` compares the float images, as `calculate_psnr_pt` and Retinexformer's test script do.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import ConfigError, EvaluationError
from ..plan.crops import is_whole
from .checks import check_pair

PEAK = 255.0  # PSNR's peak and SSIM's dynamic range: the metrics work on the 0-255 scale, as BasicSR's do
# MATLAB's rgb2ycbcr (ITU-R BT.601, studio swing), as BasicSR's rgb2ycbcr: Y = 16 + 65.481 R + 128.553 G + 24.966 B
# for R, G, B in [0, 1], so Y is in [16, 235] on the 0-255 scale
Y_WEIGHTS = (65.481, 128.553, 24.966)
Y_OFFSET = 16.0
WINDOW, SIGMA = 11, 1.5  # SSIM's Gaussian window (Wang et al. 2004, and cv2.getGaussianKernel(11, 1.5) in BasicSR)
C1, C2 = (0.01 * PEAK) ** 2, (0.03 * PEAK) ** 2
# the gray weights whose means GT-mean matches. KinD and LLFlow apply cv2's BGR2GRAY to images read with
# cv2.imread (BGR), which gives BT.601 luma. Retinexformer's script applies BGR2GRAY to RGB arrays, so R and B
# trade weights; RETINEXFORMER_LUMA reproduces its numbers.
BT601_LUMA = (0.299, 0.587, 0.114)
RETINEXFORMER_LUMA = (0.114, 0.587, 0.299)
# what a metric needing RGB or gray says of other images, and how to go on
Y_NEEDS = "y_channel=True needs RGB (3) or gray (1); compare them with y_channel=False"
GRAY_NEEDS = "GT-mean's gray level needs RGB (3) or gray (1); score other images with psnr and ssim"


@dataclass(frozen=True, kw_only=True)
class MetricConfig:
    """The options every metric takes. `crop_border`: pixels left out at each edge (BasicSR's `crop_border`);
    `y_channel`: compare the Y channel of YCbCr (BasicSR's `test_y_channel`; a 1-channel image is its own Y);
    `quantize`: round to 8 bits first (BasicSR's validation) or compare the float images."""

    crop_border: int = 0
    y_channel: bool = False
    quantize: bool = True

    def __post_init__(self) -> None:
        if not is_whole(self.crop_border) or self.crop_border < 0:
            raise ConfigError.for_value("crop_border", self.crop_border, "expected a whole number of pixels, 0 or "
                                        "more", fix="pass crop_border=0 to keep every pixel")
        for name in ("y_channel", "quantize"):
            value = getattr(self, name)
            if not isinstance(value, (bool, np.bool_)):
                raise ConfigError.for_value(name, repr(value), "expected True or False")
            object.__setattr__(self, name, bool(value))  # numpy's True too


def levels(x: torch.Tensor, quantize: bool = True) -> torch.Tensor:
    """`x` as float64 levels on the 0-255 scale. uint8 is taken as it is. Floats are clamped to [0, 1] and, with
    `quantize`, rounded to 8 bits exactly as `tensor2img` does: in float32, so that the levels are bit for bit
    those BasicSR's validation compares."""
    if x.dtype == torch.uint8:
        return x.to(torch.float64)
    if quantize:
        return x.float().clamp(0, 1).mul(PEAK).round().to(torch.float64)
    return x.to(torch.float64).clamp(0, 1).mul(PEAK)


def y_of(x: torch.Tensor) -> torch.Tensor:
    """The Y channel (N×1×H×W, 0-255 scale) of RGB levels on the 0-255 scale, as MATLAB's rgb2ycbcr; a 1-channel
    image is returned as it is (as BasicSR's `to_y_channel` does)."""
    if x.shape[1] == 1:
        return x
    w = torch.tensor(Y_WEIGHTS, dtype=x.dtype, device=x.device).view(1, 3, 1, 1) / PEAK
    return (x * w).sum(dim=1, keepdim=True) + Y_OFFSET


def check_config(config, where: str) -> None:
    if not isinstance(config, MetricConfig):
        raise ConfigError(f"{where}: config is a {type(config).__name__}; expected a pairload.evaluate.MetricConfig, "
                          "e.g. MetricConfig(crop_border=4, y_channel=True)")


def checked(output, target, config: MetricConfig, where: str, gt_mean: bool = False, **layout) -> None:
    """Refuse what `config`'s metrics (and GT-mean's, with `gt_mean`) cannot compare (`checks.check_pair`, which
    takes the `layout` keywords)."""
    check_config(config, where)
    check_pair(output, target, where, gray_for=GRAY_NEEDS if gt_mean else Y_NEEDS if config.y_channel else None,
               **layout)


def prepare(output: torch.Tensor, target: torch.Tensor, config: MetricConfig,
            where: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Both images, as `checked` lets them through, as the metrics compare them: float64 levels (rounded to 8 bits
    with `quantize`), the border cropped, then the Y channel if asked."""
    b = config.crop_border
    h, w = target.shape[-2:]
    if b and (2 * b >= h or 2 * b >= w):
        raise EvaluationError(f"{where}: crop_border={b} leaves nothing of {h}×{w} images; expected images larger "
                              f"than {2 * b}×{2 * b} (lower crop_border)")
    pair = []
    for x in (output, target):
        x = levels(x, config.quantize)
        if b:
            x = x[..., b:-b, b:-b]
        pair.append(y_of(x) if config.y_channel else x)
    return pair[0], pair[1]


def _config(crop_border, y_channel, quantize) -> MetricConfig:
    return MetricConfig(crop_border=crop_border, y_channel=y_channel, quantize=quantize)


def psnr_of(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """PSNR (dB, per image) of prepared levels: 10·log10(255² / MSE); inf where the images are equal (as BasicSR's
    numpy `calculate_psnr`; its torch version adds 1e-8 to the MSE instead)."""
    mse = (a - b).pow(2).mean(dim=(1, 2, 3))
    return 10 * torch.log10(PEAK ** 2 / mse)


def psnr(output: torch.Tensor, target: torch.Tensor, *, crop_border: int = 0, y_channel: bool = False,
         quantize: bool = True) -> torch.Tensor:
    """Per-image PSNR in dB (float64, N) as BasicSR's `calculate_psnr`: peak 255, MSE over every channel and pixel
    left after `crop_border`, on the Y channel with `y_channel`; inf for identical images."""
    config = _config(crop_border, y_channel, quantize)
    checked(output, target, config, "psnr")
    return psnr_of(*prepare(output, target, config, "psnr"))


def _window(dtype: torch.dtype, device) -> torch.Tensor:
    x = torch.arange(WINDOW, dtype=torch.float64, device=device) - (WINDOW - 1) / 2
    g = torch.exp(-x * x / (2 * SIGMA ** 2))
    return (g / g.sum()).to(dtype)


def _filter(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The Gaussian window over each channel, 'valid' positions only (BasicSR: cv2.filter2D, then [5:-5, 5:-5]).
    The 11×11 window is the outer product of `g`, so two 1-D passes give the same sums in 22 products a pixel
    instead of 121."""
    c = x.shape[1]
    x = F.conv2d(x, g.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)
    return F.conv2d(x, g.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)


def ssim_of(a: torch.Tensor, b: torch.Tensor, where: str = "ssim") -> torch.Tensor:
    """SSIM (per image) of prepared levels: the mean of the SSIM map over every channel and valid position (for
    RGB the mean of the three channels' SSIM, as BasicSR)."""
    h, w = a.shape[-2:]
    if h < WINDOW or w < WINDOW:
        raise EvaluationError(f"{where}: images of {h}×{w} (after crop_border); expected at least "
                              f"{WINDOW}×{WINDOW}, the SSIM window (lower crop_border, or leave SSIM out)")
    g = _window(a.dtype, a.device)
    mu1, mu2 = _filter(a, g), _filter(b, g)
    mu1_sq, mu2_sq, mu12 = mu1 * mu1, mu2 * mu2, mu1 * mu2
    s1 = _filter(a * a, g) - mu1_sq
    s2 = _filter(b * b, g) - mu2_sq
    s12 = _filter(a * b, g) - mu12
    ssim_map = ((2 * mu12 + C1) * (2 * s12 + C2)) / ((mu1_sq + mu2_sq + C1) * (s1 + s2 + C2))
    return ssim_map.mean(dim=(1, 2, 3))


def ssim(output: torch.Tensor, target: torch.Tensor, *, crop_border: int = 0, y_channel: bool = False,
         quantize: bool = True) -> torch.Tensor:
    """Per-image SSIM (float64, N) as BasicSR's `calculate_ssim`: 11×11 Gaussian window (σ 1.5), valid positions
    only, C1 = (0.01·255)², C2 = (0.03·255)², on levels 0-255; RGB: the mean over the channels."""
    config = _config(crop_border, y_channel, quantize)
    checked(output, target, config, "ssim")
    return ssim_of(*prepare(output, target, config, "ssim"))


def check_luma(luma) -> tuple[float, float, float]:
    """`luma` as three gray weights (R, G, B): real, finite, not negative, not all 0."""
    weights = tuple(luma) if isinstance(luma, (tuple, list)) or isinstance(luma, np.ndarray) and luma.ndim == 1 else ()
    if (len(weights) != 3 or not all(isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
                                     and v >= 0 for v in weights) or not sum(weights)):
        raise ConfigError.for_value("luma", luma, "expected three gray weights (R, G, B), none negative and not all "
                                    "0, e.g. BT601_LUMA", fix="pass luma=BT601_LUMA or RETINEXFORMER_LUMA")
    return tuple(float(v) for v in weights)


def _gt_mean_scale(output: torch.Tensor, target: torch.Tensor, luma) -> torch.Tensor:
    weights = check_luma(luma)
    out, tgt = levels(output, False) / PEAK, levels(target, False) / PEAK

    def gray_mean(x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] == 3:
            x = (x * torch.tensor(weights, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)).sum(dim=1, keepdim=True)
        return x.mean(dim=(1, 2, 3))

    mean_out, mean_tgt = gray_mean(out), gray_mean(tgt)
    ratio = torch.where(mean_out > 0, mean_tgt / mean_out.clamp_min(1e-300), torch.ones_like(mean_out))
    return (out * ratio.view(-1, 1, 1, 1)).clamp(0, 1)


def gt_mean_scale(output: torch.Tensor, target: torch.Tensor, luma=BT601_LUMA) -> torch.Tensor:
    """`output` (clamped to [0, 1], float64) times the ratio of the target's mean gray level to its own, clipped to
    [0, 1]: the GT-mean correction. Gray is `luma`-weighted RGB (a 1-channel image is its own gray), averaged over
    the whole image. An all-black output stays black (its ratio would be infinite)."""
    check_pair(output, target, "gt_mean_scale", gray_for=GRAY_NEEDS)
    return _gt_mean_scale(output, target, luma)


def gt_mean_psnr(output: torch.Tensor, target: torch.Tensor, *, crop_border: int = 0, y_channel: bool = False,
                 quantize: bool = True, luma=BT601_LUMA) -> torch.Tensor:
    """Per-image PSNR (float64, N) after `gt_mean_scale`: the output's mean gray level is made the target's
    before comparing. This is the "GT-mean" or "GT-adjusted" PSNR of KinD, LLFlow and Retinexformer's `--GT_mean`,
    which takes out the global brightness a low-light model cannot know. Retinexformer's script compares float
    images with its own gray weights (`quantize=False, luma=RETINEXFORMER_LUMA`)."""
    config = _config(crop_border, y_channel, quantize)
    checked(output, target, config, "gt_mean_psnr", gt_mean=True)
    return psnr_of(*prepare(_gt_mean_scale(output, target, luma), target, config, "gt_mean_psnr"))


def scores(output: torch.Tensor, target: torch.Tensor, config: MetricConfig = MetricConfig(),
           luma=BT601_LUMA) -> dict[str, torch.Tensor]:
    """{"psnr", "ssim", "psnr_gt_mean"}: the three per-image metrics of one batch, under one `config`."""
    checked(output, target, config, "scores", gt_mean=True)
    return scores_of(output, target, config, luma, "scores")


def scores_of(output: torch.Tensor, target: torch.Tensor, config: MetricConfig, luma,
              where: str) -> dict[str, torch.Tensor]:
    """`scores` of images `checked` lets through."""
    a, b = prepare(output, target, config, where)
    adjusted, _ = prepare(_gt_mean_scale(output, target, luma), target, config, where)
    return {"psnr": psnr_of(a, b), "ssim": ssim_of(a, b, where), "psnr_gt_mean": psnr_of(adjusted, b)}
