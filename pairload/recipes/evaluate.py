"""Validation of the reference loop: PSNR, SSIM and GT-mean PSNR as papers report them (`pairload.evaluate`:
BasicSR's formulas on 8-bit images, --crop-border, --y-channel) over every test pair exactly once across ranks
(padded rows never counted), next to the do-nothing baseline, and the low | output | high pictures of a few test
images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..batch import Normalize
from ..distributed import DistInfo
from ..evaluate.meter import ValidationMetrics
from ..format.atomic import write_bytes_atomic
from .config import TrainConfig
from .loop import amp_context
from .model import centre_frame


@torch.no_grad()
def evaluate(model, loader, norm: Normalize, cfg: TrainConfig, info: DistInfo, keep_images: int = 0) -> dict:
    """The means over every test pair (each once across ranks; padded rows are never counted): val_psnr, val_ssim,
    val_psnr_gt_mean, val_samples, and the input's val_psnr_input, val_ssim_input (None for a camera raw input,
    which has no do-nothing baseline). The model pads inputs to its multiple itself (`EnhanceUNet.forward`). Of a clip
    the centre frame is scored (the model's output against its target; the baseline its input), and counted once."""
    model.eval()
    dev = info.device
    metrics = ValidationMetrics(cfg.metric_config(), device=dev)
    inputs = ValidationMetrics(cfg.metric_config(), device=dev)  # the do-nothing baseline: is training helping?
    images = []
    baseline = True
    for batch in loader:
        x, y = norm.pair(batch)
        with amp_context(cfg.amp, dev):
            out = model(x)
        out = out.float().clamp(0, 1)
        x, y = centre_frame(x), centre_frame(y)
        valid = batch.valid.to(dev)
        metrics.update(out, y, valid)
        baseline = x.shape == y.shape  # a camera raw input (4 channels, half size) has no do-nothing baseline
        if baseline:
            inputs.update(x.float(), y, valid)
        if len(images) < keep_images:
            for j in range(min(keep_images - len(images), len(batch))):
                images.append(torch.cat(([x[j]] if baseline else []) + [out[j], y[j]], dim=2).cpu())
    got, base = metrics.compute(), inputs.compute()  # every rank, each once: both all-reduce
    return {"val_psnr": got["psnr"], "val_ssim": got["ssim"], "val_psnr_gt_mean": got["psnr_gt_mean"],
            "val_samples": got["count"], "val_psnr_input": base["psnr"] if baseline else None,
            "val_ssim_input": base["ssim"] if baseline else None, "images": images}


def save_triplets(images: list[torch.Tensor], path: Path) -> None:
    """low | output | high, one row per test image, as a PNG written atomically."""
    import cv2

    if not images:
        return
    width = max(im.shape[2] for im in images)  # test images may differ in size: pad each row on the right
    rows = [F.pad(im, (0, width - im.shape[2])) for im in images]
    grid = torch.cat(rows, dim=1).clamp(0, 1).mul(255).round().byte().permute(1, 2, 0).numpy()
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(grid[..., ::-1]))
    write_bytes_atomic(path, buf.tobytes(), fsync=False)


