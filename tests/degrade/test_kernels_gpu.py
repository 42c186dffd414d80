"""The Triton kernels against the numpy executors on a CUDA device: the same Philox words bit for bit, the same
outputs within the stated tolerance, a sample's bytes the same alone and inside any batch, and a pixel's noise the
same under every orientation."""

from __future__ import annotations

import numpy as np
import pytest

from pairload.dihedral import CODES, TRANSPOSE, orient
from degrade_cases import keys, levels, run_numpy, table, targets

pytestmark = pytest.mark.gpu

# what CPU and CUDA outputs agree to (docs/degrade.md): every value within one stored step (raw: within one
# electron's counts, a Poisson count flipped at a boundary) and at most this fraction of values differing
AGREE = {"lowlight": (1, 2e-3), "unprocess": (1, 2e-3), "raw-physics": (3, 2e-3)}


def _cuda(model, high, tab, key, code):
    import torch

    from pairload.degrade.launch import launch
    from pairload.degrade.models import models

    dev = torch.device("cuda")
    hi = torch.from_numpy(high.view(np.int16) if high.dtype == np.uint16 else high).to(dev)
    if high.dtype == np.uint16:
        hi = hi.view(torch.uint16)
    lo = torch.empty_like(hi)
    n = len(high)
    lv = torch.from_numpy(levels(n)).to(dev)
    launch(models()[model], None, hi, lo, torch.from_numpy(tab).to(dev), torch.from_numpy(key.view(np.int64)).to(dev),
           torch.from_numpy(code.astype(np.int32)).to(dev), torch.ones(n, dtype=torch.int32, device=dev), lv)
    out = lo
    if out.dtype == torch.uint16:
        return out.view(torch.int16).cpu().numpy().view(np.uint16)
    return out.cpu().numpy()


def test_philox_words_match_numpy():
    import torch
    import triton
    import triton.language as tl

    from pairload.degrade.rng import philox

    @triton.jit
    def words(out, key_ptr, N: tl.constexpr):
        c = tl.arange(0, N).to(tl.uint32) * 2654435761
        zero = c * 0
        key = tl.load(key_ptr).to(tl.uint64, bitcast=True)
        a, b, d, e = tl.philox(key, c, zero + 1, zero + 2, zero, 10)
        at = out + tl.arange(0, N)
        tl.store(at, a.to(tl.int32, bitcast=True))
        tl.store(at + N, b.to(tl.int32, bitcast=True))
        tl.store(at + 2 * N, d.to(tl.int32, bitcast=True))
        tl.store(at + 3 * N, e.to(tl.int32, bitcast=True))

    key = np.array([0xDEADBEEF12345678], dtype=np.uint64)
    out = torch.empty(4 * 256, dtype=torch.int32, device="cuda")
    words[(1,)](out, torch.from_numpy(key.view(np.int64)).cuda(), N=256)
    got = out.cpu().numpy().view(np.uint32).reshape(4, 256)
    c = (np.arange(256, dtype=np.uint64) * 2654435761) & 0xFFFFFFFF
    want = np.stack(philox(key, c, 1, 2, 0))
    assert np.array_equal(got, want)


@pytest.mark.parametrize("model,dtype,h,w", [("lowlight", "uint8", 64, 64), ("lowlight", "uint16", 64, 64),
                                             ("unprocess", "uint8", 64, 64), ("raw-physics", "uint16", 64, 64),
                                             ("raw-physics", "uint16", 40, 72)])
def test_cuda_agrees_with_numpy(model, dtype, h, w):
    n = 8  # every orientation; 40×72: rows of the raw kernel ending inside a step of 32 columns, transposed windows
    high = targets(model, n, h, w, dtype)
    tab, key, code = table(model, n), keys(n), np.arange(n) % 8
    want = run_numpy(model, high, tab, key, code).astype(np.int64)
    got = _cuda(model, high, tab, key, code).astype(np.int64)
    diff = np.abs(got - want)
    step, fraction = AGREE[model]
    print(model, dtype, "max", diff.max(), "differing", (diff > 0).mean())
    assert diff.max() <= step and (diff > 0).mean() <= fraction


@pytest.mark.parametrize("model", ["lowlight", "raw-physics"])
def test_a_sample_is_the_same_alone_and_in_a_batch(model):
    n = 6
    high = targets(model, n, 48, 48, "uint8" if model == "lowlight" else "uint16")
    tab, key, code = table(model, n), keys(n), np.arange(n) % 8
    batch = _cuda(model, high, tab, key, code)
    for k in range(n):
        alone = _cuda(model, high[k:k + 1], tab[k:k + 1], key[k:k + 1], code[k:k + 1])
        assert np.array_equal(alone[0], batch[k])
    shuffled = _cuda(model, high[::-1].copy(), tab[::-1].copy(), key[::-1].copy(), code[::-1].copy())
    assert np.array_equal(shuffled[::-1], batch)


@pytest.mark.parametrize("model,dtype,h,w", [("lowlight", "uint8", 24, 24), ("lowlight", "uint16", 12, 40),
                                             ("raw-physics", "uint16", 24, 24), ("raw-physics", "uint16", 12, 40)])
def test_a_pixels_noise_follows_it_under_every_orientation(model, dtype, h, w):
    """Degrading a window cut in any orientation gives the degraded unoriented window, oriented: each
    pixel's noise (and the raw kernel's row noise) is drawn at its place in the unoriented window."""
    codes = [c for c in CODES if h == w or not c & TRANSPOSE]
    n = len(codes)
    window = targets(model, 1, h, w, dtype)[0]
    tab, key = np.repeat(table(model, 1), n, axis=0), np.repeat(keys(1), n)
    plain = _cuda(model, np.stack([window] * n), tab, key, np.zeros(n, dtype=np.int64))[0]
    oriented = _cuda(model, np.stack([orient(window, c) for c in codes]), tab, key, np.array(codes))
    wrong = [c for k, c in enumerate(codes) if not np.array_equal(oriented[k], orient(plain, c))]
    assert wrong == []
