"""The random numbers of the degradations, defined once and executed the same way by numpy (CPU) and the Triton kernels
(`pairload.degrade.kernels`): Philox4x32-10 (Salmon et al., SC 2011) keyed by a sample's 64-bit noise key, its counter
the pixel's place in the crop window, so a sample's noise depends on nothing but (seed, epoch, key, draw) and the
pixel. Uniforms keep the top 23 bits and a half step (exact in float32 on both sides, never 0 or 1); the kernels'
normal deviates invert the normal CDF by Giles' single-precision erfinv, one uniform each (`normal32`), and the host's
per-sample draws by Acklam's rational approximation in float64 (`normal`). Numpy only.
"""

from __future__ import annotations

import numpy as np

from ..dihedral import TRANSPOSE, source_index

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
    """uint32 → float32 in (0, 1): (b + 1/2)·2^-23 of the top 23 bits b. Exact in float32 (24 significant bits), so
    u and 1 - u are both uniforms of the same grid and neither is ever 0 or 1 (with 24 bits, b + 1/2 rounds to 2^24
    for the top word: u = 1)."""
    return ((np.asarray(bits, dtype=np.uint32) >> np.uint32(9)).astype(np.float32) + np.float32(0.5)) \
        * np.float32(2.0 ** -23)


# Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011), single precision: erfinv(x) = p(w)·x with
# w = -ln(1 - x²), p a polynomial in w - 2.5 (w < 5) or in √w - 3 (w >= 5, one uniform in 300); relative error of
# the normal quantile below 3e-7 over every uniform
ERFINV_W = 5.0
ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                  -0.00417768164, 0.246640727, 1.50140941)
ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
               0.00943887047, 1.00167406, 2.83297682)
LN4 = 1.3862943611198906
SQRT2 = 1.4142135623730951


def normal32(u: np.ndarray) -> np.ndarray:
    """Standard normal deviates (float32) of float32 uniforms in (0, 1), as the kernels compute them:
    √2·erfinv(2u - 1), with 1 - x² = 4u(1 - u) (exact in u, no cancellation near the tails)."""
    f = np.float32
    u = np.asarray(u, dtype=np.float32)
    w = -np.log(u * (f(1.0) - u)) - f(LN4)
    central, tail = w - f(2.5), np.sqrt(np.maximum(w, f(ERFINV_W))) - f(3.0)
    pc = np.full(u.shape, f(ERFINV_CENTRAL[0]))
    pt = np.full(u.shape, f(ERFINV_TAIL[0]))
    for c, t in zip(ERFINV_CENTRAL[1:], ERFINV_TAIL[1:]):
        pc = pc * central + f(c)
        pt = pt * tail + f(t)
    return (np.where(w < f(ERFINV_W), pc, pt) * ((f(2.0) * u - f(1.0)) * f(SQRT2))).astype(np.float32)


# Acklam's inverse normal CDF (float64 per-sample draws): central region |p - 1/2| <= 1/2 - P_LOW, tails outside it
P_LOW = 0.02425
A = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
     -3.066479806614716e+01, 2.506628277459239e+00)
B = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
     -1.328068155288572e+01)
C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
     4.374664141464968e+00, 2.938163982698783e+00)
D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00)


def normal(u: np.ndarray, dtype=np.float64) -> np.ndarray:
    """Standard normal deviates of uniforms in (0, 1), in `dtype`: the per-sample parameters drawn on the host
    (relative error below 1.2e-9 in float64). The kernels' per-pixel deviates are `normal32`'s."""
    f = np.dtype(dtype).type
    u = np.asarray(u, dtype=dtype)
    q = u - f(0.5)
    r = q * q
    num_c = (((((f(A[0]) * r + f(A[1])) * r + f(A[2])) * r + f(A[3])) * r + f(A[4])) * r + f(A[5])) * q
    den_c = ((((f(B[0]) * r + f(B[1])) * r + f(B[2])) * r + f(B[3])) * r + f(B[4])) * r + f(1.0)
    tail_p = np.minimum(u, f(1.0) - u)
    t = np.sqrt(f(-2.0) * np.log(tail_p))
    num_t = ((((f(C[0]) * t + f(C[1])) * t + f(C[2])) * t + f(C[3])) * t + f(C[4])) * t + f(C[5])
    num_t = np.where(u > f(0.5), -num_t, num_t)
    den_t = (((f(D[0]) * t + f(D[1])) * t + f(D[2])) * t + f(D[3])) * t + f(1.0)
    tail = tail_p < f(P_LOW)
    return (np.where(tail, num_t, num_c) / np.where(tail, den_t, den_c)).astype(dtype)


# sin and cos of r in [0, π/2]: their Taylor polynomials to r^11 and r^12 (error below 6e-8 there)
SIN = (-2.5052108385441720e-08, 2.7557319223985893e-06, -1.9841269841269841e-04, 8.3333333333333333e-03,
       -1.6666666666666666e-01)
COS = (2.0876756987868099e-09, -2.7557319223985888e-07, 2.4801587301587302e-05, -1.3888888888888889e-03,
       4.1666666666666664e-02, -0.5)


def turn(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cos 2πu, sin 2πu) of float32 uniforms in (0, 1), by quadrant and polynomials (as the kernels compute it)."""
    f = np.float32
    x = u * f(4.0)
    q = np.floor(x)
    r = (x - q) * f(1.5707963705062866)
    r2 = r * r
    s = ((((f(SIN[0]) * r2 + f(SIN[1])) * r2 + f(SIN[2])) * r2 + f(SIN[3])) * r2 + f(SIN[4])) * r2 * r + r
    c = (((((f(COS[0]) * r2 + f(COS[1])) * r2 + f(COS[2])) * r2 + f(COS[3])) * r2 + f(COS[4])) * r2 + f(COS[5])) \
        * r2 + f(1.0)
    cos = np.where(q == 0, c, np.where(q == 1, -s, np.where(q == 2, -c, s)))
    sin = np.where(q == 0, s, np.where(q == 1, c, np.where(q == 2, -s, -c)))
    return cos, sin


def box_muller(u0: np.ndarray, u1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two standard normal deviates (float32) of two float32 uniforms: √(-2 ln u0)·(cos 2πu1, sin 2πu1)."""
    r = np.sqrt(np.float32(-2.0) * np.log(u0))
    cos, sin = turn(u1)
    return r * cos, r * sin


def tukey(u: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """Tukey-lambda deviates of shape `lam` (one per sample: |λ| >= 1e-4) by inverting its CDF:
    (u^λ - (1-u)^λ) · (1/λ) (float32)."""
    f = np.float32
    u = np.asarray(u, dtype=np.float32)
    lam = np.asarray(lam, dtype=np.float32)
    return ((np.exp2(lam * np.log2(u)) - np.exp2(lam * np.log2(f(1.0) - u))) * (f(1.0) / lam)).astype(np.float32)


def logistic(u: np.ndarray) -> np.ndarray:
    """The λ = 0 member of the Tukey-lambda family: log(u / (1 - u)) (float32)."""
    f = np.float32
    return (np.log(u) - np.log(f(1.0) - u)).astype(np.float32)


TUKEY_ZERO = 1e-4  # |λ| below this is the logistic


def window_counter(code: np.ndarray, ho: int, wo: int) -> tuple[np.ndarray, np.ndarray]:
    """(counter, row), each (n, ho, wo): each output pixel's place in its unoriented crop window (uint32 row ×
    window width + column) and its row there, for ho×wo windows oriented by `code` (`dihedral.source_index`). The
    noise is drawn in the window's (the sensor's) frame, whatever orientation the batch was cut in."""
    code = np.asarray(code, dtype=np.int64).reshape(-1, 1, 1)
    i = np.arange(ho, dtype=np.int64).reshape(1, -1, 1)
    j = np.arange(wo, dtype=np.int64).reshape(1, 1, -1)
    r, s = source_index(code, ho, wo, i, j)
    width = np.where(code & TRANSPOSE, ho, wo)  # the unoriented window's
    return (r * width + s).astype(np.uint32), np.broadcast_to(r, (len(code), ho, wo))
