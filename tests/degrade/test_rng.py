"""The random numbers of the degradations (numpy, what the kernels compute): uniforms strictly inside (0, 1) and
symmetric, the kernels' normal quantile against the exact one, and the Poisson inversion against the exact inverse
CDF."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from pairload.degrade.models.rawphysics import inversion_cap, poisson
from pairload.degrade.rng import normal32, uniform


def _words(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    edges = np.array([0, 1, 511, 512, 0x7FFFFFFF, 0x80000000, 0xFFFFFE00, 0xFFFFFFFF], dtype=np.uint32)
    return np.concatenate([edges, rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)])


def test_uniforms_are_never_0_or_1_and_1_minus_u_is_a_uniform_too():
    bits = _words(100_000)
    u = uniform(bits)
    assert u.dtype == np.float32
    assert u.min() > 0 and u.max() < 1, (u.min(), u.max())
    assert u.max() == np.float32(1 - 2.0 ** -24)  # the top word: (2^23 - 1/2)·2^-23, exact
    assert np.array_equal(np.float32(1) - u, uniform(~bits))  # exact: the grid is symmetric


def test_the_kernels_normal_quantile_is_within_3e7_of_the_exact_one_out_to_the_last_uniform():
    u = uniform(_words(20_000))
    z = normal32(u)
    exact = np.array([NormalDist().inv_cdf(float(x)) for x in u])
    assert np.all(np.isfinite(z))
    err = np.abs(z - exact) / np.maximum(np.abs(exact), 1.0)
    assert err.max() < 3e-7, (err.max(), u[err.argmax()])
    assert np.array_equal(np.sign(z), np.sign(exact))  # symmetric about u = 1/2


def test_inversion_gives_the_exact_inverse_cdf_below_4_electrons():
    means = np.array([0.05, 0.7, 1.5, 2.9, 3.99], dtype=np.float32)
    u = uniform(_words(4000, seed=1))
    e = np.repeat(means, len(u)).astype(np.float32)
    uu = np.tile(u, len(means))
    got = poisson(e, uu)
    checked = 0
    for lam, x, k in zip(e.astype(np.float64), uu.astype(np.float64), got):
        cdf, term, want = math.exp(-lam), math.exp(-lam), 0
        while x > cdf:
            want += 1
            term *= lam / want
            cdf += term
        if abs(x - cdf) < 1e-5 or abs(x - (cdf - term)) < 1e-5:
            continue  # within float32 rounding of a step of the CDF
        assert k == min(want, inversion_cap(np.float32(lam))), (lam, x, k, want)
        checked += 1
    assert checked > 0.99 * len(got)
