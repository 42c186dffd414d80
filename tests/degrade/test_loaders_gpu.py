"""Degradations through the loaders on a CUDA device: every path (the zero-copy kernel reading targets only, a resident
copy, the workers, the streaming loader) delivers the same degraded bytes per key, and they agree with the CPU's
within the stated tolerance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pairload import make_loader

pytestmark = pytest.mark.gpu


def _inputs(loader) -> dict:
    got = {}
    for batch in loader:
        for key, low, high in zip(batch.keys, batch.low, batch.high):
            got[key] = (low.cpu().clone(), high.cpu().clone())
    loader.close()
    return got


@pytest.mark.parametrize("model", ["lowlight", "unprocess"])
def test_every_cuda_path_degrades_to_the_same_inputs(packed, model):
    common = dict(batch_size=4, crop=24, degrade=model, device="cuda")
    ref = _inputs(make_loader("ram", packed, zero_copy=True, **common))
    assert len(ref) == 8
    for kind, extra in (("ram", {"resident": True}), ("ram", {"zero_copy": False, "num_workers": 2}), ("wds", {})):
        got = _inputs(make_loader(kind, packed, **common, **extra))
        assert got.keys() == ref.keys()
        for key, (low, high) in got.items():
            assert torch.equal(high, ref[key][1]) and torch.equal(low, ref[key][0]), (kind, extra, key)
    cpu = _inputs(make_loader("ram", packed, batch_size=4, crop=24, degrade=model))
    diff = np.concatenate([(ref[k][0].int() - cpu[k][0].int()).abs().flatten().numpy() for k in ref])
    assert diff.max() <= 1 and (diff > 0).mean() <= 2e-3


@pytest.mark.dali
def test_dali_external_on_the_gpu_degrades_to_the_same_inputs(packed):
    common = dict(batch_size=4, crop=24, degrade="lowlight", device="cuda")
    ref = _inputs(make_loader("ram", packed, **common))
    for extra in ({}, {"zero_copy": False, "num_workers": 2}):
        got = _inputs(make_loader("dali-external", packed, **common, **extra))
        assert got.keys() == ref.keys()
        for key, (low, high) in got.items():
            assert torch.equal(high, ref[key][1]) and torch.equal(low, ref[key][0]), (extra, key)
