"""Images the metrics cannot score are refused in one line by every entry point (psnr, ssim, gt_mean_psnr,
gt_mean_scale, scores, ValidationMetrics.update, the BasicSR adapter, run_whole/run_tiled), naming the function, the
argument, what was found and the fix: floats on another scale than [0, 1] (0-255 levels `.float()`-ed, a
mean/std-normalised image), NaN and inf, empty images, dtypes that are no image; while a network's small overshoot
beyond [0, 1] is clamped as BasicSR clamps it."""

import numpy as np
import pytest
import torch

from pairload.basicsr.metrics import calculate_psnr_gt_mean
from pairload.errors import ConfigError, EvaluationError
from pairload.evaluate import (MetricConfig, Tiling, ValidationMetrics, gt_mean_psnr, gt_mean_scale, psnr, run_tiled,
                               run_whole, scores, ssim)

H = W = 16
ENTRY_POINTS = {
    "psnr": psnr,
    "ssim": ssim,
    "gt_mean_psnr": gt_mean_psnr,
    "gt_mean_scale": gt_mean_scale,
    "scores": scores,
    "ValidationMetrics.update": lambda o, t: ValidationMetrics().update(o, t),
    "calculate_psnr_gt_mean": lambda o, t: calculate_psnr_gt_mean(o, t),  # BasicSR's _pt form: tensors in [0, 1]
}


def images(n=1, channels=3, seed=0):
    """(output, target) floats in [0, 1]: a target and a darker, noisy output of it."""
    g = torch.Generator().manual_seed(seed)
    target = torch.rand(n, channels, H, W, generator=g)
    return (0.8 * target + 0.05 * torch.rand(n, channels, H, W, generator=g)).clamp(0, 1), target


def refused(f, *args, match, error=EvaluationError):
    with pytest.raises(error, match=match) as info:
        f(*args)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("where", ENTRY_POINTS)
def test_floats_on_the_0_255_scale_are_refused_naming_the_argument_and_the_range(where):
    output, target = images()
    levels = (target * 255).round()
    first = "img" if where == "calculate_psnr_gt_mean" else "output"
    second = "img2" if where == "calculate_psnr_gt_mean" else "target"
    for out, tgt, name in ((levels, levels, first), (output, levels, second)):
        refused(ENTRY_POINTS[where], out, tgt,
                match=rf"^{where}: {name} ranges \d+\.?\d*\.\.25\d\.?\d*; expected float images in \[0, 1\] \(an "
                      r"overshoot within -0\.5\.\.1\.5 is clamped, as BasicSR clamps it\); divide 0-255 levels by "
                      r"255, or pass the uint8 tensor$")


def test_the_reported_cases_give_the_right_number_once_divided_or_as_uint8():
    output, target = images()
    out8, tgt8 = (output * 255).round().to(torch.uint8), (target * 255).round().to(torch.uint8)
    truth = psnr(out8, tgt8)
    assert torch.equal(psnr(out8.float() / 255, tgt8.float() / 255), truth)
    clamped = psnr(out8.float().clamp(0, 1), tgt8.float().clamp(0, 1))  # what they silently gave before
    assert abs(float(clamped) - float(truth)) > 5
    refused(psnr, out8.float(), tgt8.float(), match=r"^psnr: output ranges ")
    refused(psnr, tgt8.float(), tgt8.float(), match=r"^psnr: output ranges ")  # was 4.8 dB for identical images


def test_a_networks_overshoot_is_clamped_as_basicsr_clamps_it():
    output, target = images()
    wild = target * 1.1 - 0.05  # -0.05..1.05, as from a network without a final clamp
    assert wild.min() < 0 and wild.max() > 1
    for f in (psnr, ssim, gt_mean_psnr):
        assert torch.equal(f(wild, target), f(wild.clamp(0, 1), target))
    edge = torch.full((1, 3, H, W), 1.5)
    edge[..., 0, 0] = -0.5
    assert torch.isfinite(psnr(edge, target)).all()  # the margin's own ends pass
    refused(psnr, edge * 1.001, target, match=r"^psnr: output ranges -0\.5005\.\.1\.502; ")


def test_a_normalised_image_is_refused_with_its_own_fix():
    output, target = images()
    normalised = (output - 0.45) / 0.225  # as with ImageNet's mean and std
    refused(ssim, normalised, target, match=r"^ssim: output ranges -1\.959\.\.1\.752; expected float images in "
                                            r"\[0, 1\] .*; undo the mean/std normalisation \(x \* std \+ mean\)$")


@pytest.mark.parametrize("where", ENTRY_POINTS)
def test_nan_and_inf_are_refused_with_their_count(where):
    output, target = images()
    target = target.clone()
    target[0, 0, 0, :3] = float("nan")
    target[0, 1, 2, 2] = float("-inf")
    second = "img2" if where == "calculate_psnr_gt_mean" else "target"
    refused(ENTRY_POINTS[where], output, target,
            match=rf"^{where}: {second} has 3 NaN and 1 infinite values; expected finite values \(a model that "
                  r"diverged, or a division by zero before the metric\)$")


@pytest.mark.parametrize("where", ENTRY_POINTS)
@pytest.mark.parametrize("shape", [(1, 3, 0, 0), (1, 0, H, W), (1, 3, H, 0)])
def test_empty_images_are_refused_naming_the_shape(where, shape):
    empty = torch.rand(shape)
    first = "img" if where == "calculate_psnr_gt_mean" else "output"
    refused(ENTRY_POINTS[where], empty, empty,
            match=rf"^{where}: {first} has shape {re_shape(shape)}, an empty image; expected N×C×H×W.* with at "
                  r"least 1 channel and 1×1 pixels")


def re_shape(shape):
    return r"\(" + ", ".join(map(str, shape)) + r"\)"


def test_empty_images_are_refused_by_whole_image_inference():
    refused(run_whole, torch.nn.Identity(), torch.rand(1, 3, 0, 0),
            match=r"^run_whole: input has shape \(1, 3, 0, 0\), an empty image")
    refused(run_tiled, torch.nn.Identity(), torch.rand(1, 0, 40, 40), Tiling(tile=16, overlap=4),
            match=r"^run_tiled: input has shape \(1, 0, 40, 40\), an empty image")


def test_an_empty_batch_scores_nothing():
    meter = ValidationMetrics()
    values = meter.update(torch.rand(0, 3, H, W), torch.rand(0, 3, H, W))
    assert values["psnr"].shape == (0,) and meter.compute()["count"] == 0


def test_dtypes_that_are_no_image_are_refused_with_a_fix():
    output, target = images()
    refused(psnr, output > 0.5, target, match=r"^psnr: output is torch.bool; expected float images in \[0, 1\] or "
                                              r"uint8 levels; pass x.float\(\) to compare 0/1 as black/white$")
    refused(ssim, output, target.to(torch.complex64), match=r"^ssim: target is torch.complex64; .*; pass a real image")
    refused(gt_mean_psnr, (output * 65535).to(torch.uint16), target,
            match=r"^gt_mean_psnr: output is torch.uint16; .*; divide it by its full scale \(x / 255.0 for 8-bit "
                  r"levels, x / 65535.0 for 16-bit levels, as pairload.Normalize does\)$")


def test_numpy_arrays_other_dims_and_devices():
    output, target = images()
    refused(psnr, output.numpy(), target, match=r"^psnr: output is a numpy.ndarray; expected a torch tensor N×C×H×W "
                                                r"\(a numpy H×W×C image: torch.from_numpy\(a\).permute")
    refused(ValidationMetrics().update, output.numpy(), target.numpy(),  # was an AttributeError
            match=r"^ValidationMetrics.update: output is a numpy.ndarray; expected a torch tensor N×C×H×W or "
                  r"N×T×C×H×W")
    refused(ssim, output[None], target[None], match=r"^ssim: output has shape \(1, 1, 3, 16, 16\); expected N×C×H×W$")
    refused(ValidationMetrics().update, output[None], target,
            match=r"^ValidationMetrics.update: output \(1, 1, 3, 16, 16\) and target \(1, 3, 16, 16\) differ in shape")
    refused(psnr, output, target.to("meta"), match=r"^psnr: output on cpu and target on meta; expected one device")


def test_channels_other_than_rgb_or_gray_where_gt_mean_needs_a_gray_level():
    output, target = images(channels=4)
    assert psnr(output, target).shape == (1,)  # PSNR and SSIM take any channel count
    gray = r"the images have 4 channels; GT-mean's gray level needs RGB \(3\) or gray \(1\); score other images " \
           r"with psnr and ssim$"
    for where in ("gt_mean_psnr", "scores", "ValidationMetrics.update"):
        refused(ENTRY_POINTS[where], output, target, match=rf"^{where}: {gray}")


def test_options_of_the_wrong_kind():
    output, target = images()
    refused(scores, output, target, {"crop_border": 4}, error=ConfigError,
            match=r"^scores: config is a dict; expected a pairload.evaluate.MetricConfig")
    refused(ValidationMetrics, MetricConfig, error=ConfigError, match=r"^ValidationMetrics: config is a type; ")
    for luma in (0.299, (0.3, 0.6), (-0.1, 0.6, 0.5), (0, 0, 0)):
        with pytest.raises(ConfigError, match=r"^luma=.*: expected three gray weights \(R, G, B\), none negative and "
                                              r"not all 0"):
            gt_mean_psnr(output, target, luma=luma)
    with pytest.raises(ConfigError, match=r"^luma=0.5: expected three gray weights"):
        ValidationMetrics(luma=0.5)  # at construction, not at the first batch
    refused(ValidationMetrics().update, output, target, ["yes"],
            match=r"^ValidationMetrics.update: valid has a list; expected \(1,\), one flag per image")


# ------------------------------------------------------------------ the BasicSR adapter's numpy images (0-255)

def bgr_levels(t: torch.Tensor) -> np.ndarray:
    return (t[0].permute(1, 2, 0).numpy()[..., ::-1] * 255).round().astype(np.uint8)


def test_numpy_images_are_levels_0_255_and_other_scales_are_refused():
    output, target = images()
    out, tgt = bgr_levels(output), bgr_levels(target)
    value = calculate_psnr_gt_mean(out, tgt)
    assert calculate_psnr_gt_mean(out.astype(np.float64), tgt.astype(np.float32)) == pytest.approx(value, abs=1e-9)
    refused(calculate_psnr_gt_mean, out, tgt / 255.0,
            match=r"^calculate_psnr_gt_mean: img2 ranges 0\.\.1 with fractions, an image on the \[0, 1\] "
                  r"scale; expected float levels in \[0, 255\]; multiply it by 255, or pass N×C×H×W tensors in "
                  r"\[0, 1\]$")
    refused(calculate_psnr_gt_mean, out.astype(np.uint16) * 257, tgt,
            match=r"^calculate_psnr_gt_mean: img ranges \d+\.\.\d\.\d+e\+04; expected float levels in \[0, 255\] "
                  r"\(an overshoot within -127\.5\.\.382\.5 is clamped, as BasicSR clamps it\); pass tensor2img's "
                  r"uint8 images$")
    dark = np.zeros_like(out)
    dark[0, 0] = 1  # a near-black image of whole levels is a valid 0-255 image, not a [0, 1] one
    assert np.isfinite(calculate_psnr_gt_mean(dark.astype(np.float64), tgt))


def test_numpy_images_of_the_wrong_kind_are_refused():
    output, target = images()
    out, tgt = bgr_levels(output), bgr_levels(target)
    refused(calculate_psnr_gt_mean, out, target,
            match=r"^calculate_psnr_gt_mean: img is a ndarray and img2 a torch tensor; expected two numpy images "
                  r"\(BGR levels, as tensor2img gives them\) or two tensors \(RGB in \[0, 1\]\)")
    refused(calculate_psnr_gt_mean, out[None], tgt[None],
            match=r"^calculate_psnr_gt_mean: img \(ndarray\) has shape \(1, 16, 16, 3\); expected a numpy image "
                  r"H×W×C or H×W of levels 0-255")
    refused(calculate_psnr_gt_mean, np.array([["a"]]), tgt, match=r"^calculate_psnr_gt_mean: img \(ndarray\) has "
                                                                   r"dtype <U1; expected a numpy image")
    refused(calculate_psnr_gt_mean, out[:, :0], tgt[:, :0],
            match=r"^calculate_psnr_gt_mean: img has shape \(1, 3, 16, 0\), an empty image")
    gray = out[..., 1]  # H×W: gray in either input_order
    assert calculate_psnr_gt_mean(gray, gray, input_order="CHW") == calculate_psnr_gt_mean(gray, gray) == np.inf
