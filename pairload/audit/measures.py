"""What pairload measures of every stored image and pair, once, while packing (and for an existing pack, while
auditing it): an exact hash and a perceptual fingerprint of each image, the global shift between a pair's input
and target, and each side's brightness. Numpy and OpenCV only (packing imports neither torch nor DALI); each
function takes H×W×C arrays of a member's dtype (uint8 or uint16 RGB, or other channel counts).

These signatures are the contract between packing (which stores `PairFacts` as index columns) and auditing (which
compares them); their implementations may change, their meaning may not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FP_BITS = 64  # bits of a perceptual fingerprint (a uint64)
# what these functions measure, by version: facts kept beside an index by another version are measured again
# (2: the exact hash's low half is the image's plain CRC-32; the shift from the halves' projections)
VERSION = 2


def exact_hash(img: np.ndarray) -> int:
    """A 64-bit hash of the image's pixels and shape (identical pixels: identical hash), as an unsigned int: the
    CRC-32 of its bytes, and above it the CRC-32 of its shape and of the image halved (`_half`). CRC-32 runs at
    gigabytes a second, where a cryptographic hash would cost a millisecond an image, and two distinct images that
    collide in both (the CRC-32 of the bytes catches any change confined to 32 bits) are about as rare as a 64-bit
    hash's accidental collisions, all that duplicates need guarding against. Its low 32 bits are the CRC-32 a pack
    stores of the member."""
    return _scan(img, project=False)[0]


def member_crc(exact: int) -> int:
    """The CRC-32 of an image's bytes (what a pack stores of the member), from its `exact_hash`."""
    return exact & 0xFFFFFFFF


def _exact(crc: int, img: np.ndarray, half: np.ndarray) -> int:
    from ..format.crc import crc32

    head = repr((img.shape, img.dtype.str)).encode()
    return crc | crc32(np.ascontiguousarray(half).view(np.uint8).reshape(-1), crc32(head)) << 32


def _scan(img: np.ndarray, project: bool) -> tuple:
    """(exact hash, the image halved (`_half`), its projections (`_projections`; None when not asked for or the
    image is too small to measure a shift on))."""
    from ..format.crc import crc32

    h, w = img.shape[:2]
    c = 1 if img.ndim == 2 else img.shape[2]
    img = np.ascontiguousarray(img)
    flat = img.reshape(h, w * c)
    half = _half(img)
    exact = _exact(crc32(flat.view(np.uint8) if h else b""), img, half)
    if not (project and min(h, w) >= _SHIFT_LEAST):
        return exact, half, None
    if flat.dtype not in (np.uint8, np.uint16, np.float32, np.float64):
        flat = flat.astype(np.float32)  # what OpenCV adds up
    cols = np.concatenate([_sums(flat[: h // 2], 0), _sums(flat[h // 2:], 0)]).reshape(2, w, c).sum(axis=2)
    rows = np.concatenate([_sums(flat[:, : (w // 2) * c], 1), _sums(flat[:, (w // 2) * c:], 1)], axis=1).T
    return exact, half, (cols, rows)


_HALVE_FROM = 4 * 32  # the shorter side from which an image is halved for its fingerprint (see `_shrink`)


def _half(img: np.ndarray) -> np.ndarray:
    """The image averaged over 2×2 blocks (an odd last row or column left out; more than 4 channels first averaged
    into one, float32), or itself when its shorter side is under `_HALVE_FROM`."""
    if min(img.shape[:2]) < _HALVE_FROM:
        return img
    h, w = img.shape[0] // 2, img.shape[1] // 2
    return _halved(img[: 2 * h, : 2 * w])


def _halved(img: np.ndarray) -> np.ndarray:
    import cv2

    if img.ndim == 3 and img.shape[2] > 4:  # OpenCV resizes up to 4 channels
        img = img.mean(axis=2, dtype=np.float32)
    return cv2.resize(img, (img.shape[1] // 2, img.shape[0] // 2), interpolation=cv2.INTER_AREA)


def _sums(part: np.ndarray, axis: int) -> np.ndarray:
    import cv2

    return cv2.reduce(part, axis, cv2.REDUCE_SUM, dtype=cv2.CV_32F)


def perceptual_hash(img: np.ndarray) -> int:
    """A 64-bit fingerprint of what the image shows, alike (small Hamming distance) for the same scene re-encoded,
    resized, slightly cropped or shifted, or brighter or darker (a low-light input and its target agree)."""
    return _fingerprint(_shrink(img, 2 * _FP_SIDE))


def _fingerprint(shrunk: np.ndarray) -> int:
    """`perceptual_hash` of an image `_shrink`-ed for it."""
    import cv2

    # The signs of the thumbnail's lowest DCT frequencies say where it is lighter or darker than itself: a change
    # of brightness or contrast (a scale and an offset) keeps every one, and the tone curve is undone first.
    coeffs = cv2.dct(_thumbnail_of(shrunk, _FP_SIDE))
    bits = (coeffs[_FP_U, _FP_V] > _FP_FLAT).astype(np.uint8)
    return int(np.packbits(bits, bitorder="little").view("<u8")[0])


def thumbnail(img: np.ndarray, side: int) -> np.ndarray:
    """float32 side×side: the image's luma, averaged down to side×side (its aspect ratio dropped) and brought by a
    power to a median of half its maximum, so that a dark input and its target, or one photo under two tone curves,
    give alike thumbnails."""
    return _thumbnail_of(_shrink(img, 2 * side), side)


def _thumbnail_of(shrunk: np.ndarray, side: int) -> np.ndarray:
    import cv2

    small = cv2.resize(_luma(shrunk), (side, side), interpolation=cv2.INTER_AREA)
    top = float(small.max())
    if top <= 0:
        return small
    small /= top
    # its median (np.median's own arithmetic, in one partition)
    flat = np.partition(small.reshape(-1), ((small.size - 1) // 2, small.size // 2))
    middle = float((flat[(small.size - 1) // 2] + flat[small.size // 2]) / np.float32(2))
    if 0 < middle < 1:
        np.power(small, np.float32(min(max(np.log(0.5) / np.log(middle), 1 / 16), 16)), out=small)
    return small


_FP_SIDE = 32  # the thumbnail a fingerprint is the DCT of
_FP_FLAT = 1e-4  # a coefficient this small is rounding, not structure: a flat image's fingerprint is 0
# the 64 lowest DCT frequencies after the constant one, by increasing u + v: the ones a crop or a shift moves least
_FP_U, _FP_V = (np.array(c) for c in zip(*sorted(((u, v) for u in range(12) for v in range(12) if u or v),
                                                   key=lambda uv: (uv[0] + uv[1], max(uv), uv[0]))[:FP_BITS]))


def _shrink(img: np.ndarray, side: int) -> np.ndarray:
    """The image halved while both its sides stay ≥ `side` (OpenCV's block average is fastest by halves), each
    time cropped by a pixel where a side is odd (more than 4 channels first averaged into one)."""
    if min(img.shape[:2]) < 2 * side:
        return img.mean(axis=2, dtype=np.float32) if img.ndim == 3 and img.shape[2] > 4 else img
    while min(img.shape[:2]) >= 2 * side:  # the first halving averages many channels into one (`_halved`)
        h, w = img.shape[0] // 2, img.shape[1] // 2
        img = _halved(img[: 2 * h, : 2 * w])
    return img


def _luma(img: np.ndarray) -> np.ndarray:
    """Rec. 601 luma of an RGB image (the mean of the channels of another channel count), float32, in the dtype's
    units."""
    import cv2

    if img.ndim == 2:
        return img.astype(np.float32, copy=False)
    if img.shape[2] >= 3:
        if img.dtype in (np.uint8, np.uint16, np.float32):
            rgb = img if img.shape[2] == 3 else img[..., :3]
            return cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2GRAY).astype(np.float32, copy=False)
        x = img.astype(np.float32)
        return 0.299 * x[..., 0] + 0.587 * x[..., 1] + 0.114 * x[..., 2]
    return img.mean(axis=2, dtype=np.float32)


def hamming(a, b) -> np.ndarray:
    """Bits that differ between fingerprints (uint64 arrays or ints, broadcast)."""
    return popcount(np.bitwise_xor(np.asarray(a, dtype=np.uint64), np.asarray(b, dtype=np.uint64)))


def popcount(x: np.ndarray) -> np.ndarray:
    """uint8: the bits set in each element of a uint64 array (numpy >= 2 counts them itself)."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x)
    x = np.ascontiguousarray(x, dtype=np.uint64)
    return _BYTE_BITS[x.reshape(-1).view(np.uint8)].reshape(*x.shape, 8).sum(axis=-1, dtype=np.uint8)


_BYTE_BITS = np.array([bin(v).count("1") for v in range(256)], dtype=np.uint8)


def shift_between(low: np.ndarray, high: np.ndarray) -> tuple[float, float, float]:
    """(dy, dx, confidence): the global translation, in pixels of the input, that maps the input's content onto the
    target's (target ≈ input shifted by (dy, dx)), estimated so that darkness and noise do not fool it; confidence in
    [0, 1] (low: no reliable estimate, e.g. a flat image; 0: none, and the shift is 0). A target at `scale`× the
    input's size is compared at the input's size."""
    import cv2

    if min(low.shape[:2]) < _SHIFT_LEAST:
        return 0.0, 0.0, 0.0
    if high.shape[:2] != low.shape[:2]:
        high = cv2.resize(high, (low.shape[1], low.shape[0]), interpolation=cv2.INTER_AREA)
    # A translation of the image translates its projections: the sums of its columns give dx, of its rows dy. Each
    # sum averages hundreds of pixels, so the input's noise all but vanishes, and phase correlation (which whitens
    # the spectrum) of their differences ignores the input's darkness (a scale) and its shading. Each half of the
    # image (top and bottom for dx, left and right for dy) is measured on its own, and the two must agree for any
    # confidence, so that one half's noise or repeated texture cannot pass for a shift.
    return _shift_of(_projections(low), _projections(high))


def _shift_of(low: tuple, high: tuple) -> tuple[float, float, float]:
    """`shift_between` of two images of one size from their `_projections` (None: too small to measure)."""
    if low is None or high is None:
        return 0.0, 0.0, 0.0
    dx0, dx1, dy0, dy1, *peaks = _profile_shifts(low, high).tolist()
    if min(peaks) < _SHIFT_PEAK or abs(dx0 - dx1) > _SHIFT_AGREE or abs(dy0 - dy1) > _SHIFT_AGREE:
        return 0.0, 0.0, 0.0
    return (dy0 + dy1) / 2, (dx0 + dx1) / 2, min(peaks[0] + peaks[1], peaks[2] + peaks[3]) / 2


_SHIFT_AGREE = 0.5  # pixels the two halves' shifts may differ by and agree
_SHIFT_PEAK = 0.05  # the least correlation peak of a half's estimate (a flat or black image's is 0)
_SHIFT_LEAST = 8  # pixels of an input's shorter side below which no shift is measured


def _projections(img: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(2, W) sums of the columns of the image's top and bottom halves, and (2, H) sums of the rows of its left and
    right halves, every channel added, float32 (None for an image too small to measure a shift on)."""
    return _scan(img, project=True)[2]


def _profile_shifts(low: tuple, high: tuple) -> np.ndarray:
    """(8,): the shifts that map the input's profiles (`_projections`: top and bottom columns, left and right rows)
    onto the target's, to a fraction of a pixel, then the four phase-correlation peaks in [0, 1]; all four in one
    batch of FFTs."""
    import cv2

    nx, ny = low[0].shape[1] - 1, low[1].shape[1] - 1
    n = max(nx, ny)
    size = cv2.getOptimalDFTSize(n + n // 8)  # a little zero padding against wrap-around, a length FFTs are fast at
    # the profiles' differences (their shading gone), windowed: input's then target's, columns then rows
    signal = np.zeros((8, size), np.float32)
    signal[[0, 1, 4, 5], :nx] = np.diff(np.concatenate([low[0], high[0]]), axis=1) * _hann(nx)
    signal[[2, 3, 6, 7], :ny] = np.diff(np.concatenate([low[1], high[1]]), axis=1) * _hann(ny)
    spectra = np.fft.rfft(signal, axis=1)
    cross = spectra[4:] * np.conj(spectra[:4])
    cross /= np.abs(cross) + 1e-20
    r = np.fft.irfft(cross, size, axis=1)
    k = r.argmax(axis=1)
    rows = np.arange(4)
    before, peak, after = r[rows, k - 1], r[rows, k], r[rows, (k + 1) % size]
    curve = before - 2 * peak + after
    fraction = np.where(curve < 0, 0.5 * (before - after) / np.where(curve < 0, curve, -1.0), 0.0)
    shift = k + fraction
    return np.concatenate([np.where(shift > size / 2, shift - size, shift), np.clip(peak, 0.0, 1.0)])


def _hann(n: int) -> np.ndarray:
    if n not in _HANN:
        _HANN[n] = np.hanning(n).astype(np.float32)
    return _HANN[n]


_HANN: dict = {}


def luminance(img: np.ndarray) -> float:
    """Mean luma (Rec. 601) in [0, 1] of the image (its dtype's full range)."""
    top = float(np.iinfo(img.dtype).max if img.dtype.kind in "ui" else 1.0)
    means = _channel_means(img) / top  # luma is linear in the channels: the mean of luma is luma of the means
    if means.size >= 3:
        return float(0.299 * means[0] + 0.587 * means[1] + 0.114 * means[2])
    return float(means.mean())


def _channel_means(img: np.ndarray) -> np.ndarray:
    import cv2

    channels = 1 if img.ndim == 2 else img.shape[2]
    if channels <= 4 and img.dtype != np.int64 and img.dtype != np.uint64 and img.size:
        return np.array(cv2.mean(img)[:channels])
    return img.reshape(-1, channels).mean(axis=0, dtype=np.float64)


@dataclass(frozen=True)
class PairFacts:
    """What is measured of one stored pair (a targets-only sample: its target on both sides, shift 0)."""

    low_exact: int
    high_exact: int
    low_fp: int
    high_fp: int
    dy: float
    dx: float
    shift_confidence: float
    low_luma: float
    high_luma: float


def pair_facts(low: np.ndarray | None, high: np.ndarray) -> PairFacts:
    """`PairFacts` of a pair (`low` None: a targets-only sample)."""
    same = low is not None and low.shape[:2] == high.shape[:2]
    hx, hf, hl, hp = _image_facts(high, project=same)
    if low is None:
        return PairFacts(hx, hx, hf, hf, 0.0, 0.0, 0.0, hl, hl)
    lx, lf, ll, lp = _image_facts(low, project=same)
    dy, dx, conf = _shift_of(lp, hp) if same else shift_between(low, high)
    return PairFacts(lx, hx, lf, hf, dy, dx, conf, ll, hl)


def _image_facts(img: np.ndarray, project: bool) -> tuple[int, int, float, tuple | None]:
    """(exact hash, fingerprint, brightness, projections or None) of an image (`_scan`); the fingerprint and
    brightness from the image halved and averaged down further (the brightness of the averaged image is the image's
    within half a unit of its dtype)."""
    exact, half, proj = _scan(img, project)
    shrunk = _shrink(half, 2 * _FP_SIDE)
    brightness = luminance(shrunk if shrunk.dtype == img.dtype else img)  # many channels: averaged to float
    return exact, _fingerprint(shrunk), brightness, proj
