"""`ValidationMetrics`: the paper-style metrics (`pairload.evaluate.metrics`) of a validation epoch, summed per
image on the device and averaged over every image of every rank.

A mean of per-batch means, or of per-rank means, weighs images unequally when batches or ranks hold different
numbers of them (the last batch, a split that does not divide by the ranks). Summing per image and dividing once
by the total count weighs every image equally, as BasicSR's validation loop does. Padded rows (`PairBatch.valid`)
are left out. It needs neither torchmetrics nor Lightning: the reference loop and Lightning's `validation_step`
use it alike.
"""

from __future__ import annotations

import math

import torch

from ..devices import resolve_device
from ..distributed import all_reduce_sum
from ..errors import ConfigError, EvaluationError
from .metrics import BT601_LUMA, MetricConfig, check_config, check_luma, checked, scores_of

NAMES = ("psnr", "ssim", "psnr_gt_mean")


def _flags(valid, n: int, like: torch.Tensor) -> torch.Tensor:
    """`valid` as n booleans on `like`'s device, one per image (or clip) of the batch."""
    try:
        keep = torch.as_tensor(valid, device=like.device)
    except (TypeError, ValueError, RuntimeError):
        keep = None
    if keep is None or keep.shape != (n,) or keep.is_complex():
        found = f"shape {tuple(keep.shape)}" if keep is not None else f"a {type(valid).__name__}"
        raise EvaluationError(f"ValidationMetrics.update: valid has {found}; expected ({n},), one flag per image "
                              "(or clip) of the batch (PairBatch.valid)")
    if keep.dtype != torch.bool and not bool(((keep == 0) | (keep == 1)).all()):  # not weights taken for flags
        raise EvaluationError(f"ValidationMetrics.update: valid holds {keep.tolist()[:8]}; expected True/False (or "
                              "0/1) per image (or clip) of the batch (PairBatch.valid), not weights")
    return keep.to(torch.bool)


class ValidationMetrics:
    """PSNR, SSIM and GT-mean PSNR over a validation epoch. `update(output, target, valid)` per batch;
    `compute()` at the end of the epoch, on every rank (it all-reduces when torch.distributed is initialised), gives
    {"psnr", "ssim", "psnr_gt_mean": means over every valid image, "count": their number}; `reset()` before the next
    epoch. Options: a `MetricConfig`, or its fields as keywords (`crop_border=4, y_channel=True`); `luma`: the gray
    weights of GT-mean; `device`: where the sums live when this rank has no batch (default: the current CUDA device
    under NCCL, else the CPU)."""

    def __init__(self, config: MetricConfig | None = None, *, luma=BT601_LUMA, device=None, **options):
        if config is not None and options:
            raise ConfigError(f"ValidationMetrics: a config and {', '.join(sorted(options))} given; pass one of them "
                              "(MetricConfig(...) or its fields as keywords)")
        self.config = config if config is not None else MetricConfig(**options)
        check_config(self.config, "ValidationMetrics")
        check_luma(luma)
        self.luma, self.device = luma, resolve_device(device) if device is not None else None
        self._sums: torch.Tensor | None = None  # psnr, ssim, psnr_gt_mean, count: float64 on the device

    def reset(self) -> None:
        self._sums = None

    def update(self, output: torch.Tensor, target: torch.Tensor,
               valid: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Add a batch: `output` and `target` N×C×H×W (floats in [0, 1] or uint8), or of clips N×T×C×H×W (every frame
        an image); `valid` (bool N, e.g. `PairBatch.valid`) picks the rows (clips) to count. Returns the batch's
        per-image values."""
        where = "ValidationMetrics.update"
        checked(output, target, self.config, where, gt_mean=True, dims=(4, 5), layout="N×C×H×W or N×T×C×H×W")
        n, frames = len(output), output.shape[1] if output.dim() == 5 else 1
        keep = torch.ones(n, dtype=torch.bool, device=output.device) if valid is None else _flags(valid, n, output)
        if output.dim() == 5:  # clips: each frame scored as an image, counted where its clip is valid
            output, target = output.flatten(0, 1), target.flatten(0, 1)
        values = scores_of(output, target, self.config, self.luma, where)
        keep = keep.repeat_interleave(frames)
        row = torch.stack([*(values[k][keep].sum() for k in NAMES), keep.sum().to(torch.float64)])
        self._sums = row if self._sums is None else self._sums + row.to(self._sums.device)
        return values

    def _home(self) -> torch.device:
        if self.device is not None:
            return torch.device(self.device)
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def compute(self) -> dict:
        """The means over every image of every rank (NaN with no image); call it on every rank."""
        sums = self._sums.clone() if self._sums is not None else torch.zeros(4, dtype=torch.float64,
                                                                             device=self._home())
        all_reduce_sum(sums)
        count = int(sums[3])
        means = {k: float(sums[i]) / count if count else math.nan for i, k in enumerate(NAMES)}
        return {**means, "count": count}
