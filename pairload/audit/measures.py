"""What pairload measures of every stored image and pair, once, while packing (and for an existing pack, while
auditing it): an exact hash and a perceptual fingerprint of each image, the global shift between a pair's input
and target, and each side's brightness. Numpy and OpenCV only (packing imports neither torch nor DALI); each
function takes H×W×C arrays of a member's dtype (uint8 or uint16 RGB, or other channel counts).

These signatures are the contract between packing (which stores `PairFacts` as index columns) and auditing (which
compares them); their implementations may change, their meaning may not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..format.crc import crc32

FP_BITS = 64  # bits of a perceptual fingerprint (a uint64)
# what these functions measure, by version: facts kept beside an index by another version are measured again
# (2: the exact hash's low half is the image's plain CRC-32; the shift from the halves' projections. 3: an image
# from 256 pixels a side brought down by 4 in one pass (`_down`) for its fingerprint and its exact hash's upper
# half; the brightness from the column sums; the shift's FFTs OpenCV's. 4: the fingerprint's thumbnail averaged from
# the luma of the image brought down, halved to under 64 pixels a side, where it was under 128: a quarter of the
# pixels)
VERSION = 4


def exact_hash(img: np.ndarray) -> int:
    """A 64-bit hash of the image's pixels and shape (identical pixels: identical hash), as an unsigned int: the
    CRC-32 of its bytes, and above it the CRC-32 of its shape and of the image brought down (`_down`). CRC-32 runs at
    gigabytes a second, where a cryptographic hash would cost a millisecond an image, and two distinct images that
    collide in both (the CRC-32 of the bytes catches any change confined to 32 bits) are about as rare as a 64-bit
    hash's accidental collisions, all that duplicates need guarding against. Its low 32 bits are the CRC-32 a pack
    stores of the member."""
    return _scan(img, project=None)[0]


def _exact(crc: int, img: np.ndarray, down: np.ndarray) -> int:
    key = (img.shape, img.dtype.str)
    head = _HEADS.get(key)
    if head is None:
        if len(_HEADS) > 64:
            _HEADS.clear()
        head = _HEADS[key] = crc32(repr(key).encode())
    return crc | crc32(down, head) << 32  # the CRC of a contiguous array's bytes (`_down`'s are)


_HEADS: dict = {}  # the CRC-32 of (shape, dtype) by (shape, dtype): a pack's images come in a few sizes


def _scan(img: np.ndarray, project: bool | None, crc: int | None = None) -> tuple:
    """(exact hash, the image brought down (`_down`), its sums (`_sums_of`: None when `project` is None or the image
    is too small to measure a shift on; its column sums alone when `project` is False)); `crc`: the CRC-32 of the
    image's bytes where the caller has it."""
    h, w = img.shape[:2]
    img = np.ascontiguousarray(img)
    down = _down(img)
    exact = _exact(crc32(img if h else b"") if crc is None else crc, img, down)
    if project is None or min(h, w) < _SHIFT_LEAST:
        return exact, down, None
    return exact, down, _sums_of(img.reshape(h, -1), w, rows=project)


def _sums_of(flat: np.ndarray, w: int, rows: bool = True) -> tuple:
    """((1, W×C) sums of the columns of the image's top half, of its bottom half, then unless `rows` is False (H, 1)
    sums of the rows of its left half, of its right half), float32 (int32 for uint8: `_profiles` makes them float32
    in one call), from the image as H×(W×C) (`_profiles` adds up each pixel's channels)."""
    import cv2

    if flat.dtype not in (np.uint8, np.uint16, np.float32, np.float64):
        flat = flat.astype(np.float32)  # what OpenCV adds up
    h, split = flat.shape[0] // 2, (w // 2) * (flat.shape[1] // w)
    # uint8 is added up as int32 (twice as fast as into float32 for the columns; the same sums, exact: within
    # float32's exact integers up to 65,793 terms a sum), made float32 later (OpenCV adds no uint16 into int32)
    exact = flat.dtype == np.uint8 and max(flat.shape[0] - h, flat.shape[1] - split) <= 65793
    depth = cv2.CV_32S if exact else cv2.CV_32F

    def summed(part: np.ndarray, axis: int) -> np.ndarray:
        return cv2.reduce(part, axis, cv2.REDUCE_SUM, dtype=depth)

    cols = (summed(flat[:h], 0), summed(flat[h:], 0))
    if not rows:
        return cols
    return (*cols, summed(flat[:, :split], 1), summed(flat[:, split:], 1))


def _profiles(sums: list[tuple], w: int, integral: bool = False) -> tuple[np.ndarray, np.ndarray, list]:
    """((2n, W) column sums, every channel added, (2n, H) row sums, and each image's channel means) of n images'
    `_sums_of` (each image H rows, W columns), one image's halves after another's. `integral`: the images are of an
    integer type, so their sums hold whole numbers, which float64 adds up exactly in any order."""
    import cv2

    rows = _float32([part for four in sums for part in four[2:]], axis=1).T
    if len({four[0].shape for four in sums}) > 1:  # images of other channel counts: each its own
        each = [_profiles([four], w, integral) for four in sums]
        return np.concatenate([cols for cols, _, _ in each]), rows, [means[0] for _, _, means in each]
    cols = _float32([part for four in sums for part in four[:2]])
    n, c = len(sums), cols.shape[1] // w
    if integral and c <= 4:  # OpenCV adds up each half's columns channel by channel, a few times faster
        halves = cv2.reduce(cols.reshape(2 * n, w, c), 1, cv2.REDUCE_SUM, dtype=cv2.CV_64F).reshape(n, 2, c)
        totals = halves[:, 0] + halves[:, 1]
    else:
        totals = cols.reshape(n, -1, c).sum(axis=1, dtype=np.float64)
    means = (totals / (rows.shape[1] * w)).tolist()
    if c > 1:  # the channels added in order, as a sum over them would, without numpy's loop per pixel
        channels = [cols[:, i::c] for i in range(c)]
        cols = channels[0] + channels[1]
        for more in channels[2:]:
            cols += more
    return cols, rows, means


def _float32(parts: list[np.ndarray], axis: int = 0) -> np.ndarray:
    """The sums joined along `axis`, as float32 (int32 ones made float32 after joining: one call)."""
    if all(part.dtype == np.int32 for part in parts):
        return np.concatenate(parts, axis=axis).astype(np.float32)
    return np.concatenate([part.astype(np.float32, copy=False) for part in parts], axis=axis)


_HALVE_FROM = 4 * 32  # the shorter side from which an image is brought down for its fingerprint (`_down`)
_QUARTER_FROM = 8 * 32  # and from which by 4 at once


def _down(img: np.ndarray) -> np.ndarray:
    """The image brought down once for its fingerprint (`_fingerprints` takes it on) and its exact hash: from a shorter
    side of `_QUARTER_FROM`, to a quarter of each side, each pixel the mean of the middle 2×2 pixels of its 4×4
    block (OpenCV's bilinear resize, exactly; it reads half of the image's rows, where a 2×2 block average reads all
    and is done twice); from `_HALVE_FROM`, to half, each pixel its 2×2 block's mean; below, itself. An odd last
    row or column is left out; more than 4 channels are first averaged into one (float32)."""
    import cv2

    h, w = img.shape[:2]
    if min(h, w) < _HALVE_FROM:
        return img
    if min(h, w) < _QUARTER_FROM:
        return _halved(img[: h // 2 * 2, : w // 2 * 2])
    img = _one_channel(img)  # OpenCV resizes up to 4 channels
    return cv2.resize(img[: h // 4 * 4, : w // 4 * 4], (w // 4, h // 4), interpolation=cv2.INTER_LINEAR)


def _halved(img: np.ndarray) -> np.ndarray:
    import cv2

    img = _one_channel(img)  # OpenCV resizes up to 4 channels
    return cv2.resize(img, (img.shape[1] // 2, img.shape[0] // 2), interpolation=cv2.INTER_AREA)


def perceptual_hash(img: np.ndarray) -> int:
    """A 64-bit fingerprint of what the image shows, alike (small Hamming distance) for the same scene re-encoded,
    resized, slightly cropped or shifted, or brighter or darker (a low-light input and its target agree)."""
    return _fingerprint(_down(img))


def _fingerprint(down: np.ndarray) -> int:
    """`perceptual_hash` of an image brought down for it (`_down`)."""
    return _fingerprints([down])[0]


def _fingerprints(downs: list[np.ndarray]) -> list[int]:
    """`_fingerprint` of each image, together: its thumbnail averaged from its luma halved while its sides stay at
    least `_FP_FROM` (in float32: a dark input's few levels are not rounded again)."""
    import cv2

    # The signs of the thumbnail's lowest DCT frequencies say where it is lighter or darker than itself: a change
    # of brightness or contrast (a scale and an offset) keeps every one, and the tone curve is undone first.
    coeffs = np.stack([cv2.dct(small) for small in _thumbnails(downs, _FP_SIDE, halve_from=_FP_FROM)])
    bits = np.packbits(coeffs[:, _FP_U, _FP_V] > _FP_FLAT, axis=1, bitorder="little")
    return bits.reshape(-1).view("<u8").tolist()


def thumbnail(img: np.ndarray, side: int) -> np.ndarray:
    """float32 side×side: the image's luma, averaged down to side×side (its aspect ratio dropped) and brought by a
    power to a median of half its maximum, so that a dark input and its target, or one photo under two tone curves,
    give alike thumbnails."""
    return _thumbnail_of(_shrink(img, 2 * side), side)


def _thumbnail_of(shrunk: np.ndarray, side: int) -> np.ndarray:
    return _thumbnails([shrunk], side)[0]


def _thumbnails(shrunk: list[np.ndarray], side: int, halve_from: int | None = None) -> np.ndarray:
    """(n, side, side): `_thumbnail_of` each image, together; `halve_from`: each image's luma first halved (2×2 means)
    while its sides stay at least that (an odd side cropped by a pixel each time)."""
    import cv2

    # images of one size stacked: OpenCV's area average keeps each output row within its own image (a side averaged
    # down to a power of 2 has cells whose bounds are exact binary fractions, and a halving's blocks lie within an
    # image cropped to a multiple of its power of 2), so each comes out as it would alone
    groups = _alike(shrunk) if side & (side - 1) == 0 else [[i] for i in range(len(shrunk))]
    small = np.empty((len(shrunk), side, side), np.float32) if len(groups) != 1 else None
    for group in groups:
        h, w = shrunk[group[0]].shape[:2]
        halvings = 0
        while halve_from is not None and min(h >> halvings, w >> halvings) >= 2 * halve_from:
            halvings += 1
        hh, ww = h >> halvings << halvings, w >> halvings << halvings
        parts = [_one_channel(shrunk[i][:hh, :ww]) for i in group]
        lum = _luma(np.concatenate(parts) if len(parts) > 1 else parts[0])
        for _ in range(halvings):
            lum = cv2.resize(lum, (lum.shape[1] // 2, lum.shape[0] // 2), interpolation=cv2.INTER_AREA)
        out = cv2.resize(lum, (side, side * len(group)), interpolation=cv2.INTER_AREA)
        if small is None:
            small = out.reshape(len(group), side, side)
        else:
            small[group] = out.reshape(len(group), side, side)
    flat = small.reshape(len(small), -1)
    tops = flat.max(axis=1, keepdims=True)
    lit = [top > 0 for top, in tops.tolist()]  # a black thumbnail stays as it is
    if all(lit):
        flat /= tops
    else:
        np.divide(flat, tops, out=flat, where=np.array(lit)[:, None])
    # the medians: the middle value of each, or the mean of the two middle ones (the upper one placed by a
    # partition, the lower one the largest before it: a partition at two places costs several times one)
    n = flat.shape[1]
    upper = n // 2
    ordered = np.partition(flat, upper, axis=1)
    middles = ordered[:, upper].tolist()
    if n % 2 == 0:
        middles = [(a + b) / 2 for a, b in zip(ordered[:, :upper].max(axis=1).tolist(), middles)]
    powers = []  # each thumbnail's power (1: left as it is), in float32 as a Python float would be taken
    for middle, on in zip(middles, lit):
        powers.append(min(max(math.log(0.5) / math.log(middle), 1 / 16), 16) if on and 0 < middle < 1 else 1.0)
    if any(power != 1.0 for power in powers):
        np.power(small, np.array(powers, np.float32)[:, None, None], out=small)
    return small


def _one_channel(img: np.ndarray) -> np.ndarray:
    """More than 4 channels averaged into one (float32), which OpenCV's resize and colour conversion need; others as
    they are."""
    return img.mean(axis=2, dtype=np.float32) if img.ndim == 3 and img.shape[2] > 4 else img


def _alike(images: list[np.ndarray]) -> list[list[int]]:
    """The positions of the images, grouped by shape and dtype (each group in order)."""
    groups: dict = {}
    for i, img in enumerate(images):
        groups.setdefault((img.shape, img.dtype.str), []).append(i)
    return list(groups.values())


_FP_SIDE = 32  # the thumbnail a fingerprint is the DCT of (a power of 2: `_thumbnails` stacks images)
_FP_FROM = _FP_SIDE  # it is averaged from the image's luma halved while its sides stay at least this
_FP_FLAT = 1e-4  # a coefficient this small is rounding, not structure: a flat image's fingerprint is 0
# the 64 lowest DCT frequencies after the constant one, by increasing u + v: the ones a crop or a shift moves least
_FP_U, _FP_V = (np.array(c) for c in zip(*sorted(((u, v) for u in range(12) for v in range(12) if u or v),
                                                   key=lambda uv: (uv[0] + uv[1], max(uv), uv[0]))[:FP_BITS]))


def _shrink(img: np.ndarray, side: int) -> np.ndarray:
    """The image halved while both its sides stay ≥ `side` (OpenCV's block average is fastest by halves), each
    time cropped by a pixel where a side is odd (more than 4 channels first averaged into one)."""
    if min(img.shape[:2]) < 2 * side:
        return _one_channel(img)
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
    return _shift_of(*_profiles([_projections(low), _projections(high)], low.shape[1])[:2])


def _shift_of(cols: np.ndarray, rows: np.ndarray) -> tuple[float, float, float]:
    """`shift_between` of two images of one size from their `_profiles` (input's halves, then target's)."""
    shifts, peaks = _profile_shifts_of(cols, rows)
    return _agreed(shifts[0], peaks[0])


def _agreed(shifts: list[float], peaks: list[float]) -> tuple[float, float, float]:
    """(dy, dx, confidence) from the four halves' shifts and peaks (`_profile_shifts_of`): none unless they agree."""
    dx0, dx1, dy0, dy1 = shifts
    if min(peaks) < _SHIFT_PEAK or abs(dx0 - dx1) > _SHIFT_AGREE or abs(dy0 - dy1) > _SHIFT_AGREE:
        return 0.0, 0.0, 0.0
    return (dy0 + dy1) / 2, (dx0 + dx1) / 2, min(peaks[0] + peaks[1], peaks[2] + peaks[3]) / 2


_SHIFT_AGREE = 0.5  # pixels the two halves' shifts may differ by and agree
_SHIFT_PEAK = 0.05  # the least correlation peak of a half's estimate (a flat or black image's is 0)
_SHIFT_LEAST = 8  # pixels of an input's shorter side below which no shift is measured


def _projections(img: np.ndarray) -> tuple:
    """The `_sums_of` an image at least `_SHIFT_LEAST` pixels a side."""
    img = np.ascontiguousarray(img)
    h, w = img.shape[:2]
    return _sums_of(img.reshape(h, w * (1 if img.ndim == 2 else img.shape[2])), w)


def _profile_shifts_of(cols: np.ndarray, rows: np.ndarray) -> tuple[list, list]:
    """The shifts that map each input's profiles (`_profiles`: top and bottom columns, left and right rows) onto its
    target's, to a fraction of a pixel, and the four phase-correlation peaks in [0, 1], of n pairs of one size
    (`_profiles` of each pair's input then target, one pair after another) in one batch of FFTs: n lists of four
    shifts, and n of four peaks. Each row's FFT and every step after are the same as for a pair alone."""
    import cv2

    n = len(cols) // 4
    nx, ny = cols.shape[1] - 1, rows.shape[1] - 1
    m = max(nx, ny)
    size = cv2.getOptimalDFTSize(m + m // 8)  # a little zero padding against wrap-around, a length FFTs are fast at
    # the profiles' differences (their shading gone), windowed: the input's columns and rows, then the target's
    signal = np.zeros((8 * n, size), np.float32)
    by = signal.reshape(n, 2, 2, 2, size)  # which pair, input or target, columns or rows, which half
    for profiles, part, k in ((cols, by[:, :, 0, :, :nx], nx), (rows, by[:, :, 1, :, :ny], ny)):
        pairs = profiles.reshape(n, 2, 2, -1)
        np.subtract(pairs[..., 1:], pairs[..., :-1], out=part)
        part *= _hann(k)
    spectra = cv2.dft(signal, flags=cv2.DFT_ROWS)  # each row's spectrum packed: DC, (re, im) pairs, [Nyquist]
    if n == 1:
        target, source = spectra[4:], spectra[:4]
    else:
        sides = spectra.reshape(n, 2, 4, size)
        target, source = (np.ascontiguousarray(sides[:, i]).reshape(4 * n, size) for i in (1, 0))
    cross = cv2.mulSpectrums(target, source, cv2.DFT_ROWS, conjB=True)
    pairs = (size - 1) // 2
    parts = cross[:, 1:1 + 2 * pairs]
    scale = np.abs(parts.view(np.complex64))
    scale += 1e-20
    np.divide(1, scale, out=scale)
    # the phase alone: each term times the reciprocal of its magnitude (the very bits numpy's complex division by
    # a real gives, which multiplies by it too, at a fraction of its cost), both of its parts by one row-wise product
    parts *= np.repeat(scale, 2, axis=1)
    ends = cross[:, :: size - 1] if size % 2 == 0 else cross[:, :1]  # the real DC and Nyquist terms
    np.sign(ends, out=ends)
    r = cv2.idft(cross, flags=cv2.DFT_ROWS | cv2.DFT_REAL_OUTPUT | cv2.DFT_SCALE)
    ks = r.argmax(axis=1)
    # the peak and its neighbours, as float64, fitted to a parabola for the fraction of a pixel
    around = (ks[:, None] + np.arange(-1, 2)) % size + (np.arange(len(r)) * size)[:, None]
    before, peak, after = r.take(around).astype(np.float64).T
    curve = before - 2 * peak + after
    with np.errstate(divide="ignore", invalid="ignore"):
        shift = ks + np.where(curve < 0, 0.5 * (before - after) / curve, 0.0)
    shift = np.where(shift > size / 2, shift - size, shift)
    return shift.reshape(n, 4).tolist(), np.clip(peak, 0.0, 1.0).reshape(n, 4).tolist()


def _hann(n: int) -> np.ndarray:
    if n not in _HANN:
        _HANN[n] = np.hanning(n).astype(np.float32)
    return _HANN[n]


_HANN: dict = {}


def luminance(img: np.ndarray) -> float:
    """Mean luma (Rec. 601) in [0, 1] of the image (its dtype's full range)."""
    return _luma_of(_channel_means(img), img.dtype)


def _luma_of(means, dtype: np.dtype) -> float:
    """`luminance` of an image of `dtype` from its channels' means (luma is linear in the channels: the mean of luma is
    luma of the means)."""
    top = _TOPS.get(dtype)
    if top is None:
        top = float(np.iinfo(dtype).max if dtype.kind in "ui" else 1.0)
    if len(means) >= 3:
        return float(0.299 * (means[0] / top) + 0.587 * (means[1] / top) + 0.114 * (means[2] / top))
    return float(sum(m / top for m in means) / len(means))


_TOPS = {np.dtype(np.uint8): 255.0, np.dtype(np.uint16): 65535.0}


def _channel_means(img: np.ndarray) -> list[float]:
    import cv2

    channels = 1 if img.ndim == 2 else img.shape[2]
    if channels <= 4 and img.dtype != np.int64 and img.dtype != np.uint64 and img.size:
        return list(cv2.mean(img)[:channels])
    return img.reshape(-1, channels).mean(axis=0, dtype=np.float64).tolist()


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
    """`PairFacts` of a pair (`low` None: a targets-only sample): each image's exact hash (`_scan`), its fingerprint
    from the image brought down (`_down`), its brightness from its column sums (`_profiles`); both images'
    fingerprints, and the shift and brightness from both images' sums, each in one batch."""
    return facts_of([scan_pair(low, high)])[0]


class Scan(NamedTuple):
    """A pair's pixels passed over once (`scan_pair`), right after its decode while they are in the cache: what
    `facts_of` measures, over many pairs at once, without the images."""

    exacts: tuple  # the target's exact hash, then the input's (a targets-only sample: the target's alone)
    downs: tuple  # each image brought down (`_down`), in the same order
    sums: tuple | None  # the input's and the target's `_sums_of`, where the shift and brightness come from them
    width: int
    dtypes: tuple  # the target's and the input's
    whole: tuple | None  # else (dy, dx, confidence, target's and input's brightness), measured from the images


def scan_pair(low: np.ndarray | None, high: np.ndarray, *, low_crc: int | None = None,
              high_crc: int | None = None) -> Scan:
    """The passes over a pair's pixels that its facts need (`pair_facts` is `facts_of` this); the target first,
    decoded last, its pixels still in cache. `low_crc`, `high_crc`: the CRC-32 of each image's bytes where the
    caller has made it (pack does, for its members), else made here (the exact hashes' low halves)."""
    same = low is not None and low.shape[:2] == high.shape[:2]
    images = (high,) if low is None else (high, low)
    scans = [_scan(img, same or None, crc) for img, crc in zip(images, (high_crc, low_crc))]
    exacts, downs = tuple(x for x, _, _ in scans), tuple(down for _, down, _ in scans)
    dtypes = tuple(img.dtype for img in images)
    if scans[-1][2] is not None:
        return Scan(exacts, downs, (scans[1][2], scans[0][2]), high.shape[1], dtypes, None)
    # no sums: a targets-only sample, sizes that differ, or too small for a shift
    dy, dx, conf = (0.0, 0.0, 0.0) if low is None or same else shift_between(low, high)
    return Scan(exacts, downs, None, high.shape[1], dtypes, (dy, dx, conf, *(luminance(img) for img in images)))


def facts_of(scans: list[Scan]) -> list[PairFacts]:
    """The `PairFacts` of scanned pairs: every image's fingerprint in one batch, and the shifts and brightness of
    the pairs of each size in one batch (`_profile_shifts_of`). Each pair's facts are what it gives alone."""
    if not scans:
        return []
    fps = iter(_fingerprints([down for one in scans for down in one.downs]))
    summed = [i for i, one in enumerate(scans) if one.sums is not None]
    measured: dict[int, tuple] = {}
    for group in _alike_sums([scans[i] for i in summed]):
        members = [scans[summed[i]] for i in group]
        integral = all(dtype.kind in "ui" for one in members for dtype in one.dtypes)
        cols, rows, means = _profiles([part for one in members for part in one.sums], members[0].width, integral)
        for i, shifts, peaks, (low_means, high_means) in zip(group, *_profile_shifts_of(cols, rows),
                                                              zip(means[::2], means[1::2])):
            one = scans[summed[i]]
            measured[summed[i]] = (*_agreed(shifts, peaks), _luma_of(high_means, one.dtypes[0]),
                                   _luma_of(low_means, one.dtypes[1]))
    out = []
    for i, one in enumerate(scans):
        dy, dx, conf, *lumas = one.whole if one.whole is not None else measured[i]
        if len(one.exacts) == 1:  # targets only: the target on both sides
            hx, hf, hl = one.exacts[0], next(fps), lumas[0]
            out.append(PairFacts(hx, hx, hf, hf, 0.0, 0.0, 0.0, hl, hl))
            continue
        hf, lf = next(fps), next(fps)
        out.append(PairFacts(one.exacts[1], one.exacts[0], lf, hf, dy, dx, conf, lumas[1], lumas[0]))
    return out


def _alike_sums(scans: list[Scan]) -> list[list[int]]:
    """The positions of the scans whose sums have one shape (measured in one batch), grouped."""
    groups: dict = {}
    for i, one in enumerate(scans):
        groups.setdefault((one.width, *(part.shape for four in one.sums for part in four)), []).append(i)
    return list(groups.values())
