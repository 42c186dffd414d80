"""The degradation models as Triton kernels: one launch per batch on the current stream, one program per (sample,
block of pixels), reading the oriented target and writing the input in place, with the random numbers, constants and
order of operations of the numpy executors (`pairload.degrade.rng`, `pairload.degrade.models`). Imported only on a CUDA
device."""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from ..cut.kernel.orient import TR, source
from .models.rawphysics import INVERSE_FACTORIALS, INVERSION_BELOW
from .rng import COS, ERFINV_CENTRAL, ERFINV_TAIL, ERFINV_W, LN4, ROW_TAG, SECOND, SIN, SQRT2, TUKEY_ZERO

# (output pixels, warps) per program of the sRGB kernels: whole rows of up to 256 pixels (no division per pixel), two
# warps
SHAPE = {"lowlight_kernel": (256, 2), "unprocess_kernel": (256, 2)}
# the raw kernel: one program of one warp per output row, RAW_STEP columns at a time, so that its row noise and
# parameters are computed once for the row, and its inversion and quantile run only as long as those 32 pixels need
RAW_STEP, RAW_WARPS = 32, 1
# the numpy executors' constants, as constexprs the kernels read
ERF_CENTRAL = tl.constexpr(ERFINV_CENTRAL)
ERF_TAIL = tl.constexpr(ERFINV_TAIL)
W_TAIL = tl.constexpr(ERFINV_W)
LN_4 = tl.constexpr(LN4)
SQRT_2 = tl.constexpr(SQRT2)
S0 = tl.constexpr(SIN[0])
S1 = tl.constexpr(SIN[1])
S2 = tl.constexpr(SIN[2])
S3 = tl.constexpr(SIN[3])
S4 = tl.constexpr(SIN[4])
K0 = tl.constexpr(COS[0])
K1 = tl.constexpr(COS[1])
K2 = tl.constexpr(COS[2])
K3 = tl.constexpr(COS[3])
K4 = tl.constexpr(COS[4])
K5 = tl.constexpr(COS[5])
INV_BELOW = tl.constexpr(INVERSION_BELOW)
INVFACT = tl.constexpr(INVERSE_FACTORIALS)
TUKEY0 = tl.constexpr(TUKEY_ZERO)
ROW_WORD = tl.constexpr(ROW_TAG)
SECOND_WORD = tl.constexpr(SECOND)


# logarithms by the hardware's approximation (libdevice's fast forms: one MUFU instruction, no subnormal fix-up; no
# argument here is subnormal): the accurate `tl.log2`/`tl.log` slow a loader that degrades a targets-only pack, whose
# cut reads half the bytes, so that the kernels' time shows (CHANGELOG, 2026-11-28)


@triton.jit
def _lg2(x):
    return libdevice.fast_log2f(x)


@triton.jit
def _ln(x):
    return libdevice.fast_logf(x)


@triton.jit
def _value(ptr, m):
    """A stored value as int32 (uint16 members travel as int16 views: their bits, masked back to 0..65535)."""
    return tl.load(ptr, mask=m, other=0).to(tl.int32) & 0xFFFF


@triton.jit
def _uniform(bits):
    return (bits >> 9).to(tl.float32) * 1.1920928955078125e-07 + 5.9604644775390625e-08  # (b + 1/2)·2^-23, exact


@triton.jit
def _normal(u):
    """The standard normal quantile of u (`rng.normal32`): √2·erfinv(2u - 1), Giles' polynomials in
    w = -ln(4u(1-u)): the central one in w - 2.5, the tail's in √w - 3 where w >= ERFINV_W (both computed: a select)."""
    w = -_ln(u * (1.0 - u)) - LN_4
    wc = w - 2.5
    pc = ERF_CENTRAL[0] * wc + ERF_CENTRAL[1]
    for c in tl.static_range(2, 9):
        pc = pc * wc + ERF_CENTRAL[c]
    wt = tl.sqrt(tl.maximum(w, W_TAIL)) - 3.0
    pt = ERF_TAIL[0] * wt + ERF_TAIL[1]
    for c in tl.static_range(2, 9):
        pt = pt * wt + ERF_TAIL[c]
    return tl.where(w < W_TAIL, pc, pt) * ((2.0 * u - 1.0) * SQRT_2)


@triton.jit
def _turn(u):
    x = u * 4.0
    q = tl.floor(x)
    r = (x - q) * 1.5707963705062866
    r2 = r * r
    s = ((((S0 * r2 + S1) * r2 + S2) * r2 + S3) * r2 + S4) * r2 * r + r
    c = (((((K0 * r2 + K1) * r2 + K2) * r2 + K3) * r2 + K4) * r2 + K5) * r2 + 1.0
    cos = tl.where(q == 0, c, tl.where(q == 1, -s, tl.where(q == 2, -c, s)))
    sin = tl.where(q == 0, s, tl.where(q == 1, c, tl.where(q == 2, -s, -c)))
    return cos, sin


@triton.jit
def _box_muller(u0, u1):
    r = tl.sqrt(tl.maximum(-2.0 * _ln(u0), 0.0))
    cos, sin = _turn(u1)
    return r * cos, r * sin


@triton.jit
def _tile(H, W, BR: tl.constexpr, BW: tl.constexpr):
    """This program's output rows (BR, 1), columns (1, BW) and mask."""
    i = tl.program_id(1) * BR + tl.arange(0, BR)[:, None]
    j = tl.program_id(2) * BW + tl.arange(0, BW)[None, :]
    return i, j, (i < H) & (j < W)


@triton.jit
def pixel_counter(code, i, j, H, W):
    """Each output pixel's Philox counter, its place in the unoriented window (`rng.window_counter`), and its row
    there: the noise follows the pixel, whatever orientation the window was cut in."""
    r, s = source(code, i, j, H, W)
    width = tl.where((code & TR) != 0, H, W)  # the unoriented window's
    return (r * width + s).to(tl.uint32), r


@triton.jit
def _encode(x, FULL: tl.constexpr):
    curve = 1.055 * tl.exp2(_lg2(x) * 0.4166666666666667) - 0.055
    s = tl.where(x <= 0.0031308, x * 12.92, curve)
    return tl.floor(s * FULL + 0.5)


@triton.jit
def _store(ptr, x, m):
    tl.store(ptr, x.to(tl.int32).to(ptr.dtype.element_ty), mask=m)


@triton.jit
def _rgb_normals(keys, codes, n, i, j, H, W, ROUNDS: tl.constexpr):
    """The three normal deviates of each pixel of an RGB window: Box-Muller of its Philox block's words."""
    counter, _ = pixel_counter(tl.load(codes + n), i, j, H, W)
    key = tl.load(keys + n).to(tl.uint64, bitcast=True)
    zero = counter * 0
    r0, r1, r2, r3 = tl.philox(key, counter, zero, zero, zero, ROUNDS)
    z0, z1 = _box_muller(_uniform(r0), _uniform(r1))
    z2, _ = _box_muller(_uniform(r2), _uniform(r3))
    return z0, z1, z2


@triton.jit
def _lowlight_channel(v, lut, la, b, g, gain, shot, read, z, FULL: tl.constexpr):
    d = b * tl.exp2(g * (la + tl.load(lut + v))) * gain
    x = tl.minimum(tl.maximum(d + tl.sqrt(shot * d + read) * z, 0.0), 1.0)
    return _encode(x, FULL)


@triton.jit
def lowlight_kernel(high, low, lut, table, keys, codes, apply, H, W, C: tl.constexpr, TS: tl.constexpr,
                    FULL: tl.constexpr, BR: tl.constexpr, BW: tl.constexpr, ROUNDS: tl.constexpr):
    n = tl.program_id(0)
    if tl.load(apply + n) != 0:
        i, j, m = _tile(H, W, BR, BW)
        z0, z1, z2 = _rgb_normals(keys, codes, n, i, j, H, W, ROUNDS)
        t = table + n * TS
        la = _lg2(tl.load(t))
        b = tl.load(t + 1)
        g = tl.load(t + 2)
        shot = tl.load(t + 5)
        read = tl.load(t + 6)
        at = ((n * H + i) * W + j) * C  # both sides (N, H, W, C) contiguous
        src = high + at
        dst = low + at
        _store(dst, _lowlight_channel(_value(src, m), lut, la, b, g, tl.load(t + 3), shot, read, z0, FULL), m)
        _store(dst + 1, _lowlight_channel(_value(src + 1, m), lut, la, b, g, 1.0, shot, read, z1, FULL), m)
        _store(dst + 2, _lowlight_channel(_value(src + 2, m), lut, la, b, g, tl.load(t + 4), shot, read, z2,
                                               FULL), m)


@triton.jit
def _mix(t, row, x0, x1, x2):
    return tl.load(t + 3 * row) * x0 + tl.load(t + 3 * row + 1) * x1 + tl.load(t + 3 * row + 2) * x2


@triton.jit
def _unprocess_channel(cam, mask, inv, dark, shot, read, forward, z):
    x = tl.minimum(tl.maximum(cam * tl.maximum(mask + (1.0 - mask) * inv, inv), 0.0), 1.0) * dark
    x = x + tl.sqrt(shot * x + read) * z
    return tl.minimum(tl.maximum(x * forward, 0.0), 1.0)


@triton.jit
def _process_channel(t, row, n0, n1, n2, FULL: tl.constexpr):
    x = tl.minimum(tl.maximum(_mix(t, row, n0, n1, n2), 0.0), 1.0)
    x = tl.exp2(_lg2(tl.maximum(x, 1e-8)) * 0.45454545454545453)
    x = 3.0 * x * x - 2.0 * x * x * x
    return tl.floor(x * FULL + 0.5)


@triton.jit
def unprocess_kernel(high, low, lut, table, keys, codes, apply, H, W, C: tl.constexpr, TS: tl.constexpr,
                     FULL: tl.constexpr, BR: tl.constexpr, BW: tl.constexpr, ROUNDS: tl.constexpr):
    n = tl.program_id(0)
    if tl.load(apply + n) != 0:
        i, j, m = _tile(H, W, BR, BW)
        z0, z1, z2 = _rgb_normals(keys, codes, n, i, j, H, W, ROUNDS)
        t = table + n * TS
        red = tl.load(t + 18)
        blue = tl.load(t + 19)
        rgb = tl.load(t + 20)
        dark = tl.load(t + 21)
        shot = tl.load(t + 22)
        read = tl.load(t + 23)
        at = ((n * H + i) * W + j) * C
        src = high + at
        l0 = tl.load(lut + _value(src, m))
        l1 = tl.load(lut + _value(src + 1, m))
        l2 = tl.load(lut + _value(src + 2, m))
        c0 = _mix(t, 0, l0, l1, l2)
        c1 = _mix(t, 1, l0, l1, l2)
        c2 = _mix(t, 2, l0, l1, l2)
        gray = (c0 + c1 + c2) * 0.3333333432674408
        mask = tl.maximum(gray - 0.9, 0.0) * 10.0
        mask = mask * mask
        n0 = _unprocess_channel(c0, mask, 1.0 / (red * rgb), dark, shot, read, red, z0)
        n1 = _unprocess_channel(c1, mask, 1.0 / rgb, dark, shot, read, 1.0, z1)
        n2 = _unprocess_channel(c2, mask, 1.0 / (blue * rgb), dark, shot, read, blue, z2)
        dst = low + at
        _store(dst, _process_channel(t + 9, 0, n0, n1, n2, FULL), m)
        _store(dst + 1, _process_channel(t + 9, 1, n0, n1, n2, FULL), m)
        _store(dst + 2, _process_channel(t + 9, 2, n0, n1, n2, FULL), m)


@triton.jit
def _term(k, g, d, es, c):
    """One term of the inversion (`models.rawphysics.poisson`): g = es^j, d = (its partial sum of es^i/i!) - u·e^es,
    and the count of partial sums below the threshold (d's sign bit, added as an integer). The partial sums never
    decrease, so the terms below are a prefix: counting them all and capping the count once gives the inversion."""
    g = g * es
    d = d + g * c
    k = k + (d.to(tl.uint32, bitcast=True) >> 31)
    return k, g, d


@triton.jit
def _start(e, u, m):
    """The inversion's first term of each value: (small, es, cap, g, d, k); d is positive where a value is not small."""
    small = (e < INV_BELOW) & m
    es = tl.where(small, e, 0.0)
    cap = tl.floor(es + 6.0 * tl.sqrt(es) + 6.0)
    d = 1.0 - tl.where(small, u * tl.exp(es), 0.0)
    g = es * 0.0 + 1.0
    k = d.to(tl.uint32, bitcast=True) >> 31
    return small, es, cap, g, d, k


@triton.jit
def _quantile(e, u):
    """The Poisson count of a mean of at least INV_BELOW: its Cornish-Fisher quantile (`models.rawphysics.poisson`)."""
    el = tl.maximum(e, INV_BELOW)
    z = _normal(u)
    x = el + tl.sqrt(el - 0.0833333358168602) * z + (z * z - 1.0) * 0.1666666716337204 \
        + (z - z * z * z) * (0.013888888992369175 * tl.math.rsqrt(el))
    return tl.maximum(tl.floor(x + 0.5), 0.0)


@triton.jit
def _any(a, b, c, d):
    """Whether any value of the tile is still counting (a scalar)."""
    on = (a | b | c | d).to(tl.int32)
    return tl.max(tl.max(on, axis=1), axis=0) > 0


@triton.jit
def _shot(e0, e1, e2, e3, u0, u1, u2, u3, m):
    """Poisson counts of the four channels' means: one inversion for all four (as many terms as the tile's counts
    need), then the quantile where any mean is large."""
    s0, es0, cap0, g0, d0, k0 = _start(e0, u0, m)
    s1, es1, cap1, g1, d1, k1 = _start(e1, u1, m)
    s2, es2, cap2, g2, d2, k2 = _start(e2, u2, m)
    s3, es3, cap3, g3, d3, k3 = _start(e3, u3, m)
    # terms four at a time, until no value can count on (its partial sum has passed its threshold, or its cap is
    # reached): later terms would change no count; six blocks reach past every cap (22)
    going = _any(d0 < 0.0, d1 < 0.0, d2 < 0.0, d3 < 0.0)
    for block in tl.static_range(6):
        if going:
            for step in tl.static_range(4):
                c = INVFACT[block * 4 + step + 1]
                k0, g0, d0 = _term(k0, g0, d0, es0, c)
                k1, g1, d1 = _term(k1, g1, d1, es1, c)
                k2, g2, d2 = _term(k2, g2, d2, es2, c)
                k3, g3, d3 = _term(k3, g3, d3, es3, c)
            kk = block * 4 + 5
            going = _any((d0 < 0.0) & (kk < cap0), (d1 < 0.0) & (kk < cap1), (d2 < 0.0) & (kk < cap2),
                         (d3 < 0.0) & (kk < cap3))
    k0 = tl.minimum(k0.to(tl.float32), cap0)
    k1 = tl.minimum(k1.to(tl.float32), cap1)
    k2 = tl.minimum(k2.to(tl.float32), cap2)
    k3 = tl.minimum(k3.to(tl.float32), cap3)
    large = (s0 & s1 & s2 & s3) | (~m)
    if tl.min(tl.min(large.to(tl.int32), axis=1), axis=0) == 0:
        k0 = tl.where(s0, k0, _quantile(e0, u0))
        k1 = tl.where(s1, k1, _quantile(e1, u1))
        k2 = tl.where(s2, k2, _quantile(e2, u2))
        k3 = tl.where(s3, k3, _quantile(e3, u3))
    return k0, k1, k2, k3


@triton.jit
def _electrons(src, m, c, black, inv):
    return tl.maximum(_value(src + c, m).to(tl.float32) - black, 0.0) * inv


@triton.jit
def _read(u, read_s, lam, rlam, GAUSSIAN: tl.constexpr):
    if GAUSSIAN:
        x = _normal(u)
    elif tl.abs(lam) < TUKEY0:
        x = _ln(u) - _ln(1.0 - u)
    else:
        x = (tl.exp2(lam * _lg2(u)) - tl.exp2(lam * _lg2(1.0 - u))) * rlam
    return read_s * x


@triton.jit
def _adc(dst, m, c, base, white, shot, read, row):
    """The stored count: the channel's black level and colour bias (`base`, their sum), shot, read and row noise."""
    x = base + shot + read + row
    _store(dst + c, tl.minimum(tl.maximum(tl.floor(x + 0.5), 0.0), white), m)


@triton.jit
def _row_noise(key, r, row_s, ROUNDS: tl.constexpr):
    """The two row-noise values (R's sensor row, B's) of window rows `r`."""
    rows = r.to(tl.uint32)
    zero = rows * 0
    w0, w1, w2, w3 = tl.philox(key, rows, zero + ROW_WORD, zero, zero, ROUNDS)
    za, zb = _box_muller(_uniform(w0), _uniform(w1))
    return za * row_s, zb * row_s


@triton.jit
def raw_kernel(high, low, levels, table, keys, codes, apply, H, W, C: tl.constexpr, TS: tl.constexpr,
               GAUSSIAN: tl.constexpr, BW: tl.constexpr, ROUNDS: tl.constexpr):
    """Program (n, i): output row i of sample n, BW columns at a time (RAW_STEP)."""
    n = tl.program_id(0)
    if tl.load(apply + n) != 0:
        i = tl.program_id(1) + tl.zeros((1, 1), tl.int32)
        code = tl.load(codes + n)
        key = tl.load(keys + n).to(tl.uint64, bitcast=True)
        t = table + n * TS
        ratio = tl.load(t)
        K = tl.load(t + 1)
        read_s = tl.load(t + 2)
        row_s = tl.load(t + 3)
        lam = tl.load(t + 4)
        inv = 1.0 / (ratio * K)
        rlam = 1.0 / lam
        lv = levels + n * 5
        black0 = tl.load(lv)
        black1 = tl.load(lv + 1)
        black2 = tl.load(lv + 2)
        black3 = tl.load(lv + 3)
        white = tl.load(lv + 4)
        base0 = black0 + tl.load(t + 5)  # black + colour bias, as the numpy executor adds them first
        base1 = black1 + tl.load(t + 6)
        base2 = black2 + tl.load(t + 7)
        base3 = black3 + tl.load(t + 8)
        # a window row is an output row (no transpose: its noise once for the program) or an output column
        # (transposed: once per column)
        transposed = (code & TR) != 0
        row_i, _ = source(code, i, 0, H, W)
        ra_i, rb_i = _row_noise(key, row_i, row_s, ROUNDS)
        for c0 in range(0, W, BW):
            j = c0 + tl.arange(0, BW)[None, :]
            m = j < W
            counter, row = pixel_counter(code, i, j, H, W)
            zero = counter * 0
            s0, s1, s2, s3 = tl.philox(key, counter, zero, zero, zero, ROUNDS)
            q0, q1, q2, q3 = tl.philox(key, counter, zero, zero + SECOND_WORD, zero, ROUNDS)
            full = tl.zeros((1, BW), tl.float32)
            if transposed:
                ra_j, rb_j = _row_noise(key, row, row_s, ROUNDS)
                row_a = ra_j + full
                row_b = rb_j + full
            else:
                row_a = ra_i + full
                row_b = rb_i + full
            at = ((n * H + i) * W + j) * C  # both sides (N, H, W, C) contiguous
            src = high + at
            dst = low + at
            k0, k1, k2, k3 = _shot(_electrons(src, m, 0, black0, inv), _electrons(src, m, 1, black1, inv),
                                   _electrons(src, m, 2, black2, inv), _electrons(src, m, 3, black3, inv),
                                   _uniform(s0), _uniform(s1), _uniform(s2), _uniform(s3), m)
            _adc(dst, m, 0, base0, white, k0 * K, _read(_uniform(q0), read_s, lam, rlam, GAUSSIAN), row_a)
            _adc(dst, m, 1, base1, white, k1 * K, _read(_uniform(q1), read_s, lam, rlam, GAUSSIAN), row_a)
            _adc(dst, m, 2, base2, white, k2 * K, _read(_uniform(q2), read_s, lam, rlam, GAUSSIAN), row_b)
            _adc(dst, m, 3, base3, white, k3 * K, _read(_uniform(q3), read_s, lam, rlam, GAUSSIAN), row_b)

