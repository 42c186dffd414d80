"""Odd inputs to the metrics and to whole-image inference, as an attacker would try them: integer tensors holding
8-bit levels (whose fix must not divide them by 65535), float8, sparse and meta tensors, numpy flags and weights, device
names a machine lacks, weights given as `valid`, a model that drops images or changes channels from tile to tile, and
an empty batch given to the BasicSR adapter, which returns one mean."""

import numpy as np
import pytest
import torch

from pairload.basicsr.metrics import calculate_psnr_gt_mean
from pairload.errors import ConfigError
from pairload.evaluate import Tiling, ValidationMetrics, gt_mean_psnr, psnr, run_tiled, run_whole

from test_refusals import images, refused


def test_integer_levels_are_refused_with_the_divisor_of_their_bit_depth():
    output, target = images()
    for dtype in (torch.int16, torch.int32, torch.int64):
        refused(psnr, (output * 255).round().to(dtype), target,
                match=rf"^psnr: output is {dtype}; expected float images in \[0, 1\] or uint8 levels; divide it by "
                      r"its full scale \(x / 255\.0 for 8-bit levels, x / 65535\.0 for 16-bit levels, ")


def test_float8_sparse_and_meta_tensors_are_refused_in_one_line():
    output, target = images()
    refused(psnr, output.to(torch.float8_e4m3fn), target,
            match=r"^psnr: output is torch.float8_e4m3fn; expected float images in \[0, 1\] or uint8 levels; pass "
                  r"x.float\(\)$")
    refused(psnr, output.to_sparse(), target,
            match=r"^psnr: output is a torch.sparse_coo tensor; expected a dense tensor N×C×H×W \(x.to_dense\(\)\)$")
    refused(gt_mean_psnr, output.to("meta"), target.to("meta"),
            match=r"^gt_mean_psnr: output and target are meta tensors, which hold no values; expected images on cpu")


def test_numpy_flags_and_weights_are_options_like_python_ones():
    output, target = images()
    assert torch.equal(psnr(output, target, y_channel=np.bool_(True)), psnr(output, target, y_channel=True))
    meter = ValidationMetrics(luma=np.array([0.299, 0.587, 0.114]), quantize=np.bool_(False))
    assert meter.config.quantize is False and meter.update(output, target)["psnr"].shape == (1,)
    with pytest.raises(ConfigError, match=r"^y_channel='yes': expected True or False$"):
        psnr(output, target, y_channel="yes")


@pytest.mark.parametrize("device, said", [
    ("tpu", r"device 'tpu': expected auto, cpu, cuda or cuda:K"),
    (0, r"device '0': expected auto, cpu, cuda or cuda:K"),
])
def test_a_device_name_is_refused_when_the_meter_is_made(device, said):
    with pytest.raises(ConfigError, match=f"^{said}$"):
        ValidationMetrics(device=device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_on_a_machine_without_it_is_refused_when_the_meter_is_made():
    with pytest.raises(ConfigError, match=r"^device 'cuda' but CUDA is not available here; use cpu$"):
        ValidationMetrics(device="cuda")  # was an AssertionError at compute()


def test_valid_takes_flags_not_weights():
    output, target = images(n=2)
    meter = ValidationMetrics()
    meter.update(output, target, torch.tensor([1, 0]))  # 0/1 flags count as True/False
    assert meter.compute()["count"] == 1
    for weights in (torch.tensor([0.5, 0.0]), [1, 2]):
        refused(meter.update, output, target, weights,
                match=r"^ValidationMetrics.update: valid holds \[.*\]; expected True/False \(or 0/1\) per image")


def test_a_model_that_drops_images_or_changes_channels_per_tile_is_refused():
    x = torch.rand(2, 3, 16, 16)
    refused(run_whole, lambda t: t[:1], x,
            match=r"^run_whole: the model returned 1 image\(s\) for a batch of 2; expected one output image per "
                  r"input image")
    channels = iter([3] + [1] * 8)
    refused(run_tiled, lambda t: t[:, :next(channels)], x, Tiling(tile=8, overlap=2),
            match=r"^run_tiled: the model returned 1 channels for the tile at \(0, 6\) but 3 for the first; ")


def test_the_basicsr_adapter_refuses_an_empty_batch_and_names_test_y_channel():
    output, target = images()
    refused(calculate_psnr_gt_mean, output[:0], target[:0],
            match=r"^calculate_psnr_gt_mean: img has shape \(0, 3, 16, 16\), no image; expected at least one image")
    with pytest.raises(ConfigError, match=r"^calculate_psnr_gt_mean: test_y_channel='true': expected True or False"):
        calculate_psnr_gt_mean(output, target, test_y_channel="true")
    assert calculate_psnr_gt_mean(output, target, test_y_channel=np.bool_(True)) == pytest.approx(
        calculate_psnr_gt_mean(output, target, test_y_channel=True))
