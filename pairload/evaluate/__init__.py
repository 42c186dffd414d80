"""Evaluation as low-light papers report it: PSNR, SSIM and GT-mean PSNR computed as BasicSR computes them
(`metrics`), models run on whole images of any size or in tiles (`whole`), the whole-image validation loader
(`loader`) and the epoch's means across ranks (`meter`). `docs/evaluation.md` is the guide."""

from .loader import whole_image_loader
from .meter import ValidationMetrics
from .metrics import (BT601_LUMA, RETINEXFORMER_LUMA, MetricConfig, gt_mean_psnr, gt_mean_scale, psnr, scores,
                      ssim)
from .whole import Tiling, pad_to_multiple, run_tiled, run_whole

__all__ = ["BT601_LUMA", "RETINEXFORMER_LUMA", "MetricConfig", "Tiling", "ValidationMetrics", "gt_mean_psnr",
           "gt_mean_scale", "pad_to_multiple", "psnr", "run_tiled", "run_whole", "scores", "ssim",
           "whole_image_loader"]
