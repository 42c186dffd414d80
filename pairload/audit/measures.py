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


def exact_hash(img: np.ndarray) -> int:
    """A 64-bit hash of the image's pixels and shape (identical pixels: identical hash), as an unsigned int."""
    import cv2

    from ..format.crc import crc32

    # Two CRC-32s, of the bytes and of the bytes reversed (another linear map of them): CRC-32 runs at gigabytes a
    # second, where a cryptographic hash would cost a millisecond an image. Accidental collisions, all that
    # duplicates need guarding against, are about as rare as a 64-bit hash's.
    data = np.ascontiguousarray(img).reshape(max(1, img.shape[0]), -1).view(np.uint8)
    head = repr((img.shape, img.dtype.str)).encode()
    backwards = cv2.flip(data, -1) if data.size else data
    return crc32(data, crc32(head)) | crc32(backwards, crc32(head[::-1])) << 32


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
    middle = float(np.median(small))
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
    time cropped by a pixel where a side is odd."""
    import cv2

    if img.ndim == 3 and img.shape[2] > 4:  # OpenCV resizes up to 4 channels
        img = img.mean(axis=2, dtype=np.float32)
    while min(img.shape[:2]) >= 2 * side:
        h, w = img.shape[0] // 2, img.shape[1] // 2
        img = cv2.resize(img[: 2 * h, : 2 * w], (w, h), interpolation=cv2.INTER_AREA)
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
    # Phase correlation of gradient magnitudes: it whitens the spectrum, so the input's darkness (a scale) does not
    # matter, and the blur keeps its noise from making edges of its own. Windows of full resolution keep it
    # sub-pixel and fast. Two windows must agree for any confidence, so that one window's noise or repeated texture
    # cannot pass for a shift; a third is measured only when the first two disagree.
    windows = _windows(high, _SHIFT_WINDOW, _SHIFT_WINDOWS)
    found = [_window_shift(low, high, *w) for w in windows[:2]]
    if len(found) == 2 and not _agree(found[0], found[1]):
        found += [_window_shift(low, high, *w) for w in windows[2:]]
    seen = [f for f in found if f[2] >= _SHIFT_PEAK]
    sure = [f for f in seen if sum(_agree(f, g) for g in seen) >= min(2, len(found))]  # itself and another
    if not sure:  # no two windows agree: no estimate
        return 0.0, 0.0, 0.0
    est = np.array(sure)
    weights = est[:, 2] + 1e-6
    dy, dx = (est[:, :2] * weights[:, None]).sum(axis=0) / weights.sum()
    return float(dy), float(dx), float(est[:, 2].sum() / len(found))


def _window_shift(low: np.ndarray, high: np.ndarray, y: int, x: int, hw: tuple[int, int]
                  ) -> tuple[float, float, float]:
    import cv2

    a, b = _edges(low[y:y + hw[0], x:x + hw[1]]), _edges(high[y:y + hw[0], x:x + hw[1]])
    (dx, dy), response = cv2.phaseCorrelate(a, b, _hanning(a.shape))
    return dy, dx, min(max(response, 0.0), 1.0)


def _agree(f, g) -> bool:
    return abs(f[0] - g[0]) <= _SHIFT_AGREE and abs(f[1] - g[1]) <= _SHIFT_AGREE


_SHIFT_WINDOW = 128  # side of the windows the shift is measured in (full resolution)
_SHIFT_WINDOWS = 3  # at most
_SHIFT_AGREE = 0.5  # pixels two windows' shifts may differ by and agree
_SHIFT_PEAK = 0.05  # the least correlation peak of a window's estimate (a flat or black window's is 0)
_SHIFT_LEAST = 8  # pixels of an input's shorter side below which no shift is measured


def _edges(img: np.ndarray) -> np.ndarray:
    import cv2

    y = cv2.GaussianBlur(_luma(img), (5, 5), 1.0)
    return cv2.magnitude(cv2.Sobel(y, cv2.CV_32F, 1, 0, ksize=3), cv2.Sobel(y, cv2.CV_32F, 0, 1, ksize=3))


def _windows(img: np.ndarray, side: int, count: int) -> list[tuple[int, int, tuple[int, int]]]:
    """(top, left, (h, w)) of `count` `side`-square windows spread along the image's longer middle line, inset from
    its borders (where a shifted image's content has no counterpart in the other); the middle one first."""
    h, w = img.shape[:2]
    sh, sw = min(h, side), min(w, side)
    my, mx = min((h - sh) // 2, h // 16), min((w - sw) // 2, w // 16)
    if w >= h:
        spots = [((h - sh) // 2, int(x)) for x in np.linspace(mx, w - sw - mx, count)]
    else:
        spots = [(int(y), (w - sw) // 2) for y in np.linspace(my, h - sh - my, count)]
    spots = sorted(dict.fromkeys(spots), key=lambda spot: abs(spot[0] - (h - sh) / 2) + abs(spot[1] - (w - sw) / 2))
    return [(t, lf, (sh, sw)) for t, lf in spots]


def _hanning(shape: tuple[int, int]) -> np.ndarray:
    import cv2

    if shape not in _HANNING:
        _HANNING[shape] = cv2.createHanningWindow((shape[1], shape[0]), cv2.CV_32F)
    return _HANNING[shape]


_HANNING: dict = {}


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
    hx, hf, hl = _image_facts(high)
    if low is None:
        return PairFacts(hx, hx, hf, hf, 0.0, 0.0, 0.0, hl, hl)
    dy, dx, conf = shift_between(low, high)
    lx, lf, ll = _image_facts(low)
    return PairFacts(lx, hx, lf, hf, dy, dx, conf, ll, hl)


def _image_facts(img: np.ndarray) -> tuple[int, int, float]:
    """(exact hash, fingerprint, brightness) of an image, the last two from one averaging down (the brightness of
    the averaged image is the image's within half a unit of its dtype, for a fifth of the time)."""
    shrunk = _shrink(img, 2 * _FP_SIDE)
    brightness = luminance(shrunk if shrunk.dtype == img.dtype else img)  # many channels: averaged to float
    return exact_hash(img), _fingerprint(shrunk), brightness
