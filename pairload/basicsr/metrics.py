"""GT-mean PSNR in a BasicSR-family repository's own validation (`python -m pairload.basicsr --gt-mean-psnr`).

Their validation calls each metric of the options' `val: metrics:` by its `type` name, from their `basicsr.metrics`
module (`getattr(metric_module, type)`, Restormer and Retinexformer) or its `METRIC_REGISTRY` (BasicSR 1.3 and
later), with the output and the target as `tensor2img` made them (uint8 H×W×C, BGR) or as tensors. This module
adds `calculate_psnr_gt_mean` there, computed by `pairload.evaluate.gt_mean_psnr`, and names it in the options'
metrics beside their PSNR, with its `crop_border` and `test_y_channel`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, MutableMapping

import numpy as np

from ..errors import ConfigError, EvaluationError

NAME = "psnr_gt_mean"
TYPE = "calculate_psnr_gt_mean"


def calculate_psnr_gt_mean(img, img2, crop_border: int = 0, input_order: str = "HWC", test_y_channel: bool = False,
                           **_):
    """GT-mean PSNR (dB) of one output `img` against its target `img2`, in BasicSR's metric signature: numpy
    images as `tensor2img` gives them (H×W×C or C×H×W per `input_order`, BGR, uint8 or float levels 0-255), or
    tensors N×C×H×W in [0, 1], RGB (BasicSR's `_pt` metrics' form). The mean over the images of a batch. Both
    images are checked as `pairload.evaluate`'s metrics check theirs, on their own scale."""
    import torch

    from ..evaluate.checks import LEVELS, UNIT, check_pair
    from ..evaluate.metrics import GRAY_NEEDS, gt_mean_psnr

    tensors = [isinstance(x, torch.Tensor) for x in (img, img2)]
    if tensors[0] != tensors[1]:
        kinds = ["a torch tensor" if t else f"a {type(x).__name__}" for t, x in zip(tensors, (img, img2))]
        raise EvaluationError(f"{TYPE}: img is {kinds[0]} and img2 {kinds[1]}; expected two numpy images (BGR "
                              "levels, as tensor2img gives them) or two tensors (RGB in [0, 1]), whose channel "
                              "orders differ; convert one of them")
    if tensors[0]:
        out, tgt = (x[None] if x.dim() == 3 else x for x in (img, img2))
    else:
        out, tgt = (_levels(x, name, input_order) for x, name in ((img, "img"), (img2, "img2")))
    check_pair(out, tgt, TYPE, gray_for=GRAY_NEEDS, names=("img", "img2"), scale=UNIT if tensors[0] else LEVELS)
    if not len(out):  # their loop averages the value it returns: a mean over no image would be NaN
        raise EvaluationError(f"{TYPE}: img has shape {tuple(out.shape)}, no image; expected at least one image "
                              "to score (skip empty batches before calling the metric)")
    if not isinstance(test_y_channel, (bool, np.bool_)):
        raise ConfigError.for_value(f"{TYPE}: test_y_channel", repr(test_y_channel), "expected True or False, as "
                                    "the options' test_y_channel: true or false")
    if not tensors[0]:
        out, tgt = (t if t.dtype == torch.uint8 else t / 255.0 for t in (out, tgt))
    return float(gt_mean_psnr(out, tgt, crop_border=crop_border, y_channel=test_y_channel).mean())


def _levels(img, name: str, input_order: str):
    """A numpy image in BasicSR's layout as a 1×C×H×W tensor in RGB order: uint8 kept, other numbers as float64
    levels (bool and complex kept, for the checks to refuse)."""
    import torch

    if input_order not in ("HWC", "CHW"):
        raise ConfigError(f"{TYPE}: input_order={input_order!r}: expected 'HWC' or 'CHW', as BasicSR's metrics")
    a = np.asarray(img)
    if a.dtype.kind not in "biufc" or a.ndim not in (2, 3):
        found = f"shape {a.shape}" if a.dtype.kind in "biufc" else f"dtype {a.dtype}"
        raise EvaluationError(f"{TYPE}: {name} ({type(img).__name__}) has {found}; expected a numpy image H×W×C or "
                              "H×W of levels 0-255 (as tensor2img gives them), or an N×C×H×W tensor in [0, 1]")
    if a.ndim == 2:  # gray in either order
        a = a[..., None]
    elif input_order == "CHW":
        a = a.transpose(1, 2, 0)
    if a.shape[2] == 3:
        a = a[..., ::-1]  # tensor2img's BGR to the RGB the luma weights are for
    if a.dtype.kind in "iuf" and a.dtype != np.uint8:
        a = a.astype(np.float64)
    return torch.from_numpy(a.transpose(2, 0, 1).copy())[None]  # a copy: no negative strides, even when empty


def add_gt_mean_psnr(opt: MutableMapping, note: Callable[[str], object]) -> bool:
    """Make their validation report GT-mean PSNR too: the metric registered in their `basicsr.metrics` (and
    METRIC_REGISTRY where there is one) and named first in `val: metrics:` (their loops keep the value of the
    last metric as the one they track, which stays theirs), with their PSNR's crop_border and test_y_channel.
    False, and a line to `note`, when the options have no validation metrics."""
    val = opt.get("val")
    metrics = val.get("metrics") if isinstance(val, MutableMapping) else None
    if not isinstance(metrics, MutableMapping) or not metrics:
        note("pairload: --gt-mean-psnr: the options have no val: metrics:, so there is no validation to "
                    "report GT-mean PSNR in")
        return False
    module = importlib.import_module("basicsr.metrics")
    setattr(module, TYPE, calculate_psnr_gt_mean)
    try:
        registry = importlib.import_module("basicsr.utils.registry").METRIC_REGISTRY
    except (ImportError, AttributeError):
        registry = None
    if registry is not None and TYPE not in registry:
        registry.register(calculate_psnr_gt_mean)
    psnr = next((m for m in metrics.values() if isinstance(m, MutableMapping)
                 and str(m.get("type", "")).startswith("calculate_psnr")), {})
    ours = {"type": TYPE, "crop_border": psnr.get("crop_border", 0), "test_y_channel": psnr.get("test_y_channel",
                                                                                                   False)}
    others = dict(metrics)
    metrics.clear()
    metrics.update({NAME: ours, **{k: v for k, v in others.items() if k != NAME}})
    return True
