"""The refusals of images given to evaluation: every metric entry point (`metrics`, `meter`, the BasicSR adapter in
`pairload.basicsr.metrics`) and whole-image inference (`whole`) checks its images here, so that one input is refused
alike everywhere, in one line that names the function, the argument, what was found and the fix.

Float images are on the [0, 1] scale (levels 0-255 for the BasicSR adapter's numpy images). Values up to `MARGIN`
of the scale beyond it are a network's overshoot, clamped as BasicSR's `tensor2img` clamps them; anything further
out is an image on another scale (0-255 levels `.float()`-ed, a mean/std-normalised image) and is refused, since
clamping it would give a plausible but wrong number. `docs/evaluation.md` states the rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import EvaluationError

MARGIN = 0.5  # of the scale: a [0, 1] network output overshoots by a few hundredths; 0-255 levels reach 255


@dataclass(frozen=True, kw_only=True)
class Scale:
    """What float images are expected on: `unit` is white; `expected` and `too_high` are the message's words."""

    unit: float
    expected: str
    too_high: str


UNIT = Scale(unit=1.0, expected="float images in [0, 1]",
             too_high="divide 0-255 levels by 255, or pass the uint8 tensor")
LEVELS = Scale(unit=255.0, expected="float levels in [0, 255]", too_high="pass tensor2img's uint8 images")
TOO_LOW = "undo the mean/std normalisation (x * std + mean)"
LAYOUT = "N×C×H×W"


def check_image(x, where: str, name: str = "input", dims: tuple[int, ...] = (4,), layout: str = LAYOUT) -> None:
    """`x` is a tensor of one of `dims` dimensions with no empty side but the batch (an empty batch is nothing to
    score)."""
    if not isinstance(x, torch.Tensor):
        numpy = type(x).__module__ == "numpy"
        hint = " (a numpy H×W×C image: torch.from_numpy(a).permute(2, 0, 1)[None])" if numpy else ""
        raise EvaluationError(f"{where}: {name} is a {'numpy.' * numpy}{type(x).__name__}; expected a torch tensor "
                              f"{layout}{hint}")
    if x.dim() not in dims:
        hint = " (one image: add a batch dimension with image[None])" if x.dim() == min(dims) - 1 else ""
        raise EvaluationError(f"{where}: {name} has shape {tuple(x.shape)}; expected {layout}{hint}")
    if x.layout != torch.strided:
        raise EvaluationError(f"{where}: {name} is a {x.layout} tensor; expected a dense tensor {layout} "
                              "(x.to_dense())")
    if 0 in x.shape[1:]:
        raise EvaluationError(f"{where}: {name} has shape {tuple(x.shape)}, an empty image; expected {layout} with "
                              "at least 1 channel and 1×1 pixels (check the crop or slice that made it)")


def _check_dtype(x: torch.Tensor, where: str, name: str, scale: Scale) -> None:
    if x.is_floating_point() and x.element_size() > 1 or x.dtype == torch.uint8:
        return
    if x.is_floating_point():  # float8: too coarse for a metric, and torch cannot take its minimum
        fix = "pass x.float()"
    elif x.dtype == torch.bool:
        fix = "pass x.float() to compare 0/1 as black/white"
    elif x.is_complex():
        fix = "pass a real image (x.abs() or x.real)"
    else:
        fix = ("divide it by its full scale (x / 255.0 for 8-bit levels, x / 65535.0 for 16-bit levels, as "
               "pairload.Normalize does)")
    raise EvaluationError(f"{where}: {name} is {x.dtype}; expected {scale.expected} or uint8 levels; {fix}")


def _stats(x: torch.Tensor, scale: Scale) -> torch.Tensor:
    """NaN count, infinity count, min, max, and (levels only) whether any value has a fraction, as one float64
    tensor, so that both images cost one transfer to the host."""
    x = x.detach()
    lo, hi = torch.aminmax(x)
    fraction = (x != x.round()).any() if scale.unit > 1 else torch.zeros((), dtype=torch.bool, device=x.device)
    return torch.stack([v.to(torch.float64) for v in (x.isnan().sum(), x.isinf().sum(), lo, hi, fraction)])


def _check_values(images: dict[str, torch.Tensor], where: str, scale: Scale) -> None:
    floats = {name: x for name, x in images.items() if x.is_floating_point() and x.numel()}
    if not floats:
        return
    found = torch.stack([_stats(x, scale) for x in floats.values()]).tolist()  # the only host sync
    low, high = -MARGIN * scale.unit, (1 + MARGIN) * scale.unit
    for name, (nans, infs, lo, hi, fraction) in zip(floats, found):
        if nans or infs:
            raise EvaluationError(f"{where}: {name} has {int(nans)} NaN and {int(infs)} infinite values; expected "
                                  "finite values (a model that diverged, or a division by zero before the metric)")
        if lo < low or hi > high:
            fix = TOO_LOW if lo < low else scale.too_high
            raise EvaluationError(f"{where}: {name} ranges {lo:.4g}..{hi:.4g}; expected {scale.expected} (an "
                                  f"overshoot within {low:g}..{high:g} is clamped, as BasicSR clamps it); {fix}")
        if scale.unit > 1 and hi <= 1 and fraction:
            raise EvaluationError(f"{where}: {name} ranges {lo:.4g}..{hi:.4g} with fractions, an image on the "
                                  f"[0, 1] scale; expected {scale.expected}; multiply it by 255, or pass "
                                  f"{LAYOUT} tensors in [0, 1]")


def check_pair(output, target, where: str, *, gray_for: str | None = None, names: tuple[str, str] = ("output",
               "target"), dims: tuple[int, ...] = (4,), layout: str = LAYOUT, scale: Scale = UNIT) -> None:
    """`output` and `target` can be compared: tensors of one shape on one device, float (on `scale`, finite) or
    uint8; with `gray_for` (what needs it and the fix, e.g. `metrics.Y_NEEDS`), RGB or gray."""
    for name, x in zip(names, (output, target)):
        check_image(x, where, name, dims, layout)
        _check_dtype(x, where, name, scale)
    if output.shape != target.shape:
        raise EvaluationError(f"{where}: {names[0]} {tuple(output.shape)} and {names[1]} {tuple(target.shape)} "
                              f"differ in shape; expected the same {layout} (crop the output back to the target's "
                              "size, as pairload.evaluate.run_whole does)")
    if output.device != target.device:
        raise EvaluationError(f"{where}: {names[0]} on {output.device} and {names[1]} on {target.device}; expected "
                              "one device (move one of them with .to(...))")
    if output.is_meta:
        raise EvaluationError(f"{where}: {names[0]} and {names[1]} are meta tensors, which hold no values; expected "
                              "images on cpu or cuda (compute them there)")
    channels = output.shape[-3]
    if gray_for and channels not in (1, 3):
        raise EvaluationError(f"{where}: the images have {channels} channels; {gray_for}")
    _check_values(dict(zip(names, (output, target))), where, scale)
