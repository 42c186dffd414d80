"""The random numbers of synthesis, defined once and executed the same way by numpy (CPU) and the Triton kernels
(`pairload.synth.kernels`): Philox4x32-10 (Salmon et al., SC 2011) keyed by a sample's 64-bit noise key, its counter
the pixel's place in the crop window, so a sample's noise depends on nothing but (seed, epoch, key, draw) and the
pixel. Uniforms keep the top 24 bits (exact in float32 on both sides); normal deviates invert the normal CDF with
Acklam's rational approximation (relative error below 1.2e-9), one uniform each. Numpy only.
"""

from __future__ import annotations

import numpy as np

ROUNDS = 10
_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_LO = np.uint64(0xFFFFFFFF)
ROW_TAG = 1  # counter word c1 of the per-row draws (c1 = 0: per-pixel draws)
SECOND = 2  # counter word c2 of a pixel's second block of four (c2 = 0: the first)


def philox(key: np.ndarray, c0: np.ndarray, c1: int = 0, c2: int = 0, c3: int = 0,
           rounds: int = ROUNDS) -> tuple[np.ndarray, ...]:
    """Philox4x32 of counters (c0, c1, c2, c3) under 64-bit keys (low word k0, high word k1), as `tl.philox` computes
    it: four uint32 arrays of the broadcast shape of `key` and `c0`."""
    key = np.asarray(key, dtype=np.uint64)
    k0, k1 = key & _LO, key >> np.uint64(32)
    x0 = np.asarray(c0, dtype=np.uint64) & _LO
    x0, k0, k1 = np.broadcast_arrays(x0, k0, k1)
    x1 = np.full(x0.shape, c1, np.uint64)
    x2 = np.full(x0.shape, c2, np.uint64)
    x3 = np.full(x0.shape, c3, np.uint64)
    k0, k1 = k0.copy(), k1.copy()
    for _ in range(rounds):
        p0, p1 = x0 * _M0, x2 * _M1  # exact: both factors are below 2^32
        x0, x1, x2, x3 = ((p1 >> np.uint64(32)) ^ x1 ^ k0, p1 & _LO, (p0 >> np.uint64(32)) ^ x3 ^ k1, p0 & _LO)
        k0 = (k0 + np.uint64(_W0)) & _LO
        k1 = (k1 + np.uint64(_W1)) & _LO
    return tuple(x.astype(np.uint32) for x in (x0, x1, x2, x3))


def uniform(bits: np.ndarray) -> np.ndarray:
    """uint32 → float32 in (0, 1): the top 24 bits and a half step, exact in float32."""
    return ((np.asarray(bits, dtype=np.uint32) >> np.uint32(8)).astype(np.float32) + np.float32(0.5)) \
        * np.float32(2.0 ** -24)


# Acklam's inverse normal CDF: central region |p - 1/2| <= 1/2 - P_LOW, tails outside it
P_LOW = 0.02425
A = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
     -3.066479806614716e+01, 2.506628277459239e+00)
B = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
     -1.328068155288572e+01)
C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
     4.374664141464968e+00, 2.938163982698783e+00)
D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00)


def normal(u: np.ndarray, dtype=np.float32) -> np.ndarray:
    """Standard normal deviates of uniforms in (0, 1), in `dtype` (float32: what the kernels compute, the same
    polynomials; float64 for per-sample parameters drawn on the host)."""
    f = np.dtype(dtype).type
    u = np.asarray(u, dtype=dtype)
    q = u - f(0.5)
    r = q * q
    num = ((((f(A[0]) * r + f(A[1])) * r + f(A[2])) * r + f(A[3])) * r + f(A[4])) * r + f(A[5])
    den = ((((f(B[0]) * r + f(B[1])) * r + f(B[2])) * r + f(B[3])) * r + f(B[4])) * r + f(1.0)
    central = num * q / den
    tail_p = np.minimum(u, f(1.0) - u)
    t = np.sqrt(f(-2.0) * np.log(tail_p))
    num = ((((f(C[0]) * t + f(C[1])) * t + f(C[2])) * t + f(C[3])) * t + f(C[4])) * t + f(C[5])
    den = (((f(D[0]) * t + f(D[1])) * t + f(D[2])) * t + f(D[3])) * t + f(1.0)
    tail = num / den
    tail = np.where(u > f(0.5), -tail, tail)
    return np.where(tail_p < f(P_LOW), tail, central).astype(dtype)


def tukey(u: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """Tukey-lambda deviates of shape `lam` by inverting its CDF: (u^λ - (1-u)^λ) / λ, and the logistic
    log(u / (1-u)) where |λ| < 1e-4 (float32)."""
    f = np.float32
    u = np.asarray(u, dtype=np.float32)
    lam = np.asarray(lam, dtype=np.float32)
    small = np.abs(lam) < f(1e-4)
    safe = np.where(small, f(1.0), lam)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = (np.exp2(safe * np.log2(u)) - np.exp2(safe * np.log2(f(1.0) - u))) / safe
        logistic = np.log(u) - np.log(f(1.0) - u)
    return np.where(small, logistic, q).astype(np.float32)


def window_counter(code: np.ndarray, ho: int, wo: int) -> tuple[np.ndarray, np.ndarray]:
    """(counter, row), each (n, ho, wo): each output pixel's place in its un-oriented crop window (uint32 row ×
    window width + column) and its row there, for windows oriented by `code` (`pairload.dihedral`: transpose, then vertical flip, then horizontal flip). The
    noise is drawn in the window's (the sensor's) frame, whatever orientation the batch was cut in."""
    from ..dihedral import HFLIP, TRANSPOSE, VFLIP

    code = np.asarray(code, dtype=np.int64).reshape(-1, 1, 1)
    i = np.arange(ho, dtype=np.int64).reshape(1, -1, 1)
    j = np.arange(wo, dtype=np.int64).reshape(1, 1, -1)
    j1 = np.where(code & HFLIP, wo - 1 - j, j)
    i1 = np.where(code & VFLIP, ho - 1 - i, i)
    t = (code & TRANSPOSE) != 0
    r, s = np.where(t, j1, i1), np.where(t, i1, j1)
    width = np.where(t, ho, wo)
    return (r * width + s).astype(np.uint32), np.broadcast_to(r, (len(code), ho, wo))
