"""Validation of the reference loop: PSNR/SSIM over every test pair exactly once across ranks (padded rows never
counted), next to the do-nothing baseline, and the low | output | high pictures of a few test images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..batch import Normalize
from ..distributed import DistInfo, all_reduce_sum
from ..format.atomic import write_bytes_atomic
from .config import TrainConfig
from .loop import amp_context
from .metrics import psnr, ssim


@torch.no_grad()
def evaluate(model, loader, norm: Normalize, cfg: TrainConfig, info: DistInfo, keep_images: int = 0) -> dict:
    """PSNR/SSIM over every test pair exactly once across ranks; padded rows are never counted."""
    model.eval()
    dev = info.device
    sums = torch.zeros(5, dtype=torch.float64, device=dev)  # psnr, ssim, count, and the input's psnr, ssim
    images = []
    baseline = True
    for batch in loader:
        x, y = norm.pair(batch)
        with amp_context(cfg.amp, dev):
            out = model(x)
        out = out.float().clamp(0, 1)
        valid = batch.valid.to(dev)
        sums[0] += psnr(out, y)[valid].sum().double()
        sums[1] += ssim(out, y)[valid].sum().double()
        sums[2] += valid.sum()
        baseline = x.shape == y.shape  # a camera raw input (4 channels, half size) has no do-nothing baseline
        if baseline:
            sums[3] += psnr(x.float(), y)[valid].sum().double()  # the do-nothing baseline: is training helping?
            sums[4] += ssim(x.float(), y)[valid].sum().double()
        if len(images) < keep_images:
            for j in range(min(keep_images - len(images), len(batch))):
                images.append(torch.cat(([x[j]] if baseline else []) + [out[j], y[j]], dim=2).cpu())
    all_reduce_sum(sums)
    n = max(1.0, float(sums[2]))
    return {"val_psnr": float(sums[0]) / n, "val_ssim": float(sums[1]) / n, "val_samples": int(sums[2]),
            "val_psnr_input": float(sums[3]) / n if baseline else None,
            "val_ssim_input": float(sums[4]) / n if baseline else None, "images": images}


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


