"""`pairload.evaluate.metrics` against an independent numpy/OpenCV reference written from BasicSR's formulas
(`calculate_psnr`, `calculate_ssim`, `to_y_channel`, `tensor2img`) and Retinexformer's GT-mean test, on
natural-looking images whose sides are not multiples of 8; and the errors for inputs that cannot be compared."""

import math

import numpy as np
import pytest
import torch

from pairload.errors import ConfigError, EvaluationError, PairloadError
from pairload.evaluate import (RETINEXFORMER_LUMA, MetricConfig, ValidationMetrics, gt_mean_psnr, psnr, scores,
                               ssim)

cv2 = pytest.importorskip("cv2")
H, W = 97, 131


def natural(rng, h=H, w=W, channels=3) -> np.ndarray:
    """C×H×W float64 in [0, 1]: smooth gradients, a texture of several frequencies, and noise."""
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    out = []
    for c in range(channels):
        a, b = rng.uniform(0.5, 3, 2)
        smooth = 0.35 + 0.25 * np.sin(a * np.pi * xx + c) * np.cos(b * np.pi * yy)
        texture = 0.12 * np.sin(2 * np.pi * (xx * rng.uniform(8, 20) + yy * rng.uniform(5, 15)))
        out.append(smooth + texture + rng.normal(0, 0.03, (h, w)))
    return np.clip(np.stack(out), 0, 1)


@pytest.fixture(scope="module")
def pairs():
    """(output, target) float32 N×C×H×W: targets, and outputs that are darker, blurred and noisy versions of
    them (as an enhancement model's output differs from its target); RGB and gray."""
    rng = np.random.default_rng(7)
    made = {}
    for channels in (3, 1):
        target = np.stack([natural(rng, channels=channels) for _ in range(2)])
        blurred = np.stack([[cv2.GaussianBlur(ch, (5, 5), 1.0) for ch in img] for img in target])
        output = np.clip(0.85 * blurred + 0.04 + rng.normal(0, 0.02, target.shape), 0, 1)
        made[channels] = (torch.from_numpy(output).float(), torch.from_numpy(target).float())
    return made


# ------------------------------------------------------------------ the reference, from BasicSR's formulas

def tensor2img(t: torch.Tensor) -> np.ndarray:
    """BasicSR's tensor2img for one C×H×W image: float32, clamp to [0, 1], HWC, RGB -> BGR, ×255, round, uint8."""
    img = t.float().clamp(0, 1).numpy().transpose(1, 2, 0)
    if img.shape[2] == 3:
        img = cv2.cvtColor(img, cv2.COLOR_RGB2BGR)
    return (img * 255.0).round().astype(np.uint8)


def float_bgr(t: torch.Tensor) -> np.ndarray:
    """One C×H×W float image as calculate_psnr gets it unrounded: HWC BGR float64 on the 0-255 scale."""
    img = t.double().clamp(0, 1).numpy().transpose(1, 2, 0)
    return (img[..., ::-1] if img.shape[2] == 3 else img) * 255.0


def to_y_channel(img: np.ndarray) -> np.ndarray:
    """BasicSR's to_y_channel: float32 / 255, bgr2ycbcr(y_only) (24.966 B + 128.553 G + 65.481 R + 16), ×255."""
    img = img.astype(np.float32) / 255.0
    if img.shape[2] == 3:
        img = (np.dot(img, [24.966, 128.553, 65.481]) + 16.0) / 255.0
        img = img[..., None]
    return img * 255.0


def ref_prepare(img, img2, crop_border, y_channel):
    if crop_border:
        img, img2 = img[crop_border:-crop_border, crop_border:-crop_border], img2[crop_border:-crop_border,
                                                                                  crop_border:-crop_border]
    if y_channel:
        img, img2 = to_y_channel(img), to_y_channel(img2)
    return img.astype(np.float64), img2.astype(np.float64)


def ref_psnr(img, img2, crop_border=0, y_channel=False) -> float:
    img, img2 = ref_prepare(img, img2, crop_border, y_channel)
    mse = np.mean((img - img2) ** 2)
    return float("inf") if mse == 0 else 10.0 * np.log10(255.0 * 255.0 / mse)


def ref_ssim_channel(img, img2) -> float:
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    kernel = cv2.getGaussianKernel(11, 1.5)
    window = np.outer(kernel, kernel.transpose())
    mu1 = cv2.filter2D(img, -1, window)[5:-5, 5:-5]
    mu2 = cv2.filter2D(img2, -1, window)[5:-5, 5:-5]
    s1 = cv2.filter2D(img ** 2, -1, window)[5:-5, 5:-5] - mu1 ** 2
    s2 = cv2.filter2D(img2 ** 2, -1, window)[5:-5, 5:-5] - mu2 ** 2
    s12 = cv2.filter2D(img * img2, -1, window)[5:-5, 5:-5] - mu1 * mu2
    ssim_map = ((2 * mu1 * mu2 + c1) * (2 * s12 + c2)) / ((mu1 ** 2 + mu2 ** 2 + c1) * (s1 + s2 + c2))
    return float(ssim_map.mean())


def ref_ssim(img, img2, crop_border=0, y_channel=False) -> float:
    img, img2 = ref_prepare(img, img2, crop_border, y_channel)
    return float(np.mean([ref_ssim_channel(img[..., i], img2[..., i]) for i in range(img.shape[2])]))


# ------------------------------------------------------------------ agreement

@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("crop_border", [0, 4])
@pytest.mark.parametrize("y_channel", [False, True])
@pytest.mark.parametrize("quantize", [True, False])
def test_psnr_and_ssim_match_basicsr(pairs, channels, crop_border, y_channel, quantize):
    output, target = pairs[channels]
    convert = tensor2img if quantize else float_bgr
    opts = dict(crop_border=crop_border, y_channel=y_channel, quantize=quantize)
    p, s = psnr(output, target, **opts), ssim(output, target, **opts)
    assert p.dtype == s.dtype == torch.float64 and p.shape == s.shape == (2,)
    for i in range(2):
        a, b = convert(output[i]), convert(target[i])
        assert float(p[i]) == pytest.approx(ref_psnr(a, b, crop_border, y_channel), abs=1e-4)
        assert float(s[i]) == pytest.approx(ref_ssim(a, b, crop_border, y_channel), abs=1e-6)
    got = scores(output, target, MetricConfig(**opts))
    assert torch.equal(got["psnr"], p) and torch.equal(got["ssim"], s)


def test_the_options_change_the_values(pairs):
    output, target = pairs[3]
    base = psnr(output, target)
    for other in (psnr(output, target, y_channel=True), psnr(output, target, crop_border=4),
                  psnr(output, target, quantize=False)):
        assert not torch.allclose(other, base, rtol=0, atol=1e-6)


def test_integer_valued_images_match_exactly_in_every_form(pairs):
    output, target = pairs[3]
    out8 = (output * 255).round().to(torch.uint8)
    tgt8 = (target * 255).round().to(torch.uint8)
    for y_channel in (False, True):
        from_uint8 = psnr(out8, tgt8, y_channel=y_channel), ssim(out8, tgt8, y_channel=y_channel)
        as_float = [f(out8.float() / 255, tgt8.float() / 255, y_channel=y_channel, quantize=q)
                    for f in (psnr, ssim) for q in (True, False)]
        assert torch.equal(from_uint8[0], as_float[0]) and torch.equal(from_uint8[1], as_float[2])
        assert torch.allclose(from_uint8[0], as_float[1], atol=1e-9) and torch.allclose(from_uint8[1], as_float[3],
                                                                                        atol=1e-12)
        for i in range(2):
            a, b = tensor2img(out8[i].float() / 255), tensor2img(tgt8[i].float() / 255)
            assert np.array_equal(a[..., ::-1].transpose(2, 0, 1), out8[i].numpy())  # the same levels
            assert float(from_uint8[0][i]) == pytest.approx(ref_psnr(a, b, 0, y_channel), abs=1e-4)
            assert float(from_uint8[1][i]) == pytest.approx(ref_ssim(a, b, 0, y_channel), abs=1e-6)


def test_identical_images_and_a_known_mse():
    x = torch.rand(1, 3, 20, 24)
    assert math.isinf(float(psnr(x, x))) and float(ssim(x, x)) == pytest.approx(1.0, abs=1e-12)
    a = torch.zeros(1, 1, 16, 16, dtype=torch.uint8)
    b = a + 5  # MSE 25 on the 0-255 scale
    assert float(psnr(a, b)) == pytest.approx(10 * math.log10(255 ** 2 / 25), abs=1e-12)


# ------------------------------------------------------------------ GT-mean

def retinexformer_gt_mean_psnr(output: torch.Tensor, target: torch.Tensor) -> float:
    """Retinexformer's test_from_dataset.py --GT_mean on one C×H×W image: RGB float32 HWC arrays, clamp, cv2's
    BGR2GRAY means (of RGB arrays), scale, clip, then utils.PSNR (float images, peak 1)."""
    restored = output.float().clamp(0, 1).numpy().transpose(1, 2, 0)
    tgt = target.float().numpy().transpose(1, 2, 0)
    mean_restored = cv2.cvtColor(restored.astype(np.float32), cv2.COLOR_BGR2GRAY).mean()
    mean_target = cv2.cvtColor(tgt.astype(np.float32), cv2.COLOR_BGR2GRAY).mean()
    restored = np.clip(restored * (mean_target / mean_restored), 0, 1)
    mse = np.mean((tgt.astype(np.float64) - restored.astype(np.float64)) ** 2)
    return 10 * math.log10(1 / mse)


def kind_gt_mean_psnr(output: torch.Tensor, target: torch.Tensor) -> float:
    """The same with BGR arrays (KinD, LLFlow: cv2.imread order), so BGR2GRAY is BT.601 luma; 8-bit rounded
    images compared, peak 255."""
    restored = output.float().clamp(0, 1).numpy().transpose(1, 2, 0)[..., ::-1]
    tgt = target.float().numpy().transpose(1, 2, 0)[..., ::-1]
    ratio = (cv2.cvtColor(np.ascontiguousarray(tgt), cv2.COLOR_BGR2GRAY).mean()
             / cv2.cvtColor(np.ascontiguousarray(restored), cv2.COLOR_BGR2GRAY).mean())
    restored = np.clip(restored * ratio, 0, 1)
    a, b = (restored * 255.0).round(), (tgt * 255.0).round()
    return 10 * math.log10(255.0 ** 2 / np.mean((a - b) ** 2))


def test_gt_mean_psnr_matches_retinexformer_and_kind(pairs):
    output, target = pairs[3]
    ours_rf = gt_mean_psnr(output, target, quantize=False, luma=RETINEXFORMER_LUMA)
    ours_bt601 = gt_mean_psnr(output, target)
    for i in range(2):
        assert float(ours_rf[i]) == pytest.approx(retinexformer_gt_mean_psnr(output[i], target[i]), abs=1e-4)
        assert float(ours_bt601[i]) == pytest.approx(kind_gt_mean_psnr(output[i], target[i]), abs=1e-4)
    assert (ours_bt601 > psnr(output, target)).all()  # the darker outputs gain from the correction


def test_gt_mean_takes_out_a_global_brightness_only(pairs):
    _, target = pairs[3]
    darker = target * 0.5  # exactly scaled back by the ratio 2
    assert math.isinf(float(gt_mean_psnr(darker[:1], target[:1], quantize=False)))
    assert float(psnr(darker[:1], target[:1])) < 15
    black = torch.zeros_like(target[:1])
    assert float(gt_mean_psnr(black, target[:1])) == pytest.approx(float(psnr(black, target[:1])))  # stays black


# ------------------------------------------------------------------ the epoch's means

def test_validation_metrics_weigh_every_valid_image_once(pairs):
    output, target = pairs[3]
    per_image = scores(output, target)
    meter = ValidationMetrics()
    meter.update(output[:1], target[:1])
    meter.update(output, target, valid=torch.tensor([False, True]))  # a padded row is left out
    got = meter.compute()
    assert got["count"] == 2
    for name in ("psnr", "ssim", "psnr_gt_mean"):
        assert got[name] == pytest.approx(float(per_image[name].mean()), abs=1e-12)
    meter.reset()
    meter.update(output, target)
    meter.update(output[1:], target[1:])  # three images: the second counts twice, not as a batch's mean
    assert meter.compute()["psnr"] == pytest.approx(float(per_image["psnr"][[0, 1, 1]].mean()), abs=1e-12)
    assert math.isnan(ValidationMetrics(y_channel=True).compute()["psnr"])


# ------------------------------------------------------------------ failures

def test_mismatched_shapes_say_what_was_expected_and_found():
    a, b = torch.rand(1, 3, 32, 40), torch.rand(1, 3, 32, 41)
    for f in (psnr, ssim, gt_mean_psnr):
        with pytest.raises(EvaluationError) as info:
            f(a, b)
        msg = str(info.value)
        assert isinstance(info.value, PairloadError) and "\n" not in msg
        assert "(1, 3, 32, 40)" in msg and "(1, 3, 32, 41)" in msg and "expected the same N×C×H×W" in msg
    with pytest.raises(EvaluationError, match=r"ValidationMetrics.update: valid has shape \(3,\); expected \(1,\)"):
        ValidationMetrics().update(a, a, valid=torch.ones(3, dtype=torch.bool))


def test_inputs_and_options_that_cannot_work():
    x = torch.rand(1, 3, 16, 16)
    with pytest.raises(EvaluationError, match=r"input|output has shape \(3, 16, 16\); expected N×C×H×W"):
        psnr(x[0], x[0])
    with pytest.raises(EvaluationError, match=r"images of 8×8 \(after crop_border\); expected at least 11×11"):
        ssim(x, x, crop_border=4)
    with pytest.raises(EvaluationError, match=r"crop_border=8 leaves nothing of 16×16 images"):
        psnr(x, x, crop_border=8)
    with pytest.raises(ConfigError, match=r"crop_border=-1: expected a whole number of pixels, 0 or more"):
        psnr(x, x, crop_border=-1)
    with pytest.raises(EvaluationError, match=r"psnr: the images have 4 channels; y_channel=True needs RGB \(3\) or "
                                              r"gray \(1\); compare them with y_channel=False$"):
        psnr(torch.rand(1, 4, 16, 16), torch.rand(1, 4, 16, 16), y_channel=True)
    with pytest.raises(EvaluationError, match=r"output is torch.int32; expected float images in \[0, 1\] or uint8"):
        psnr(x.int(), x)
