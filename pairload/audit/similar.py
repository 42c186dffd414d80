"""Whether two images show the same scene, measured more finely than their fingerprints: small thumbnails, their
tone curves undone (`measures.thumbnail`), aligned over a few zooms (a crop of a few percent) and a translation
(phase correlation), then compared by normalised correlation. A fingerprint search finds the candidates; this
decides them.

Brightening that clips the highlights is no tone curve: the clipped pixels lose their detail, and a cell of the
thumbnail holding clipped texture comes out darker than the curve would make it. Where `CLIPPED` to `_WHITE` of
either image's pixels are clipped, the other's thumbnail is also compared in the clipped one's tones (its cells'
ranks given the clipped thumbnail's values, so its brightest cells clip where the other's did), and the better
correlation counts."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .measures import thumbnail

SIDE = 32  # pixels of a thumbnail's side
ZOOMS = (1.0, 1 / 0.96, 1 / 0.92, 1 / 0.88)  # what a crop of up to ~6% of each side looks like, zoomed back
_HOPELESS = 0.6  # an unzoomed correlation below this is no crop of one scene: the zooms are not tried
_MARGIN = 3  # thumbnail pixels left out at each border once aligned (content shifted in from outside)
_FLAT = 1e-3  # a thumbnail whose spread is below this shows nothing to compare (a flat image)
_DETAIL = 0.045  # the least spread of a look's detail, as a share of its range (a smooth gradient has less)
_BLUR = 1.0  # sigma, thumbnail pixels: what is compared is the layout of the scene, not its texture
_BROAD = 4.0  # sigma, thumbnail pixels: the broad shading taken away, leaving the layout's detail
CLIPPED = 0.02  # the share of clipped pixels from which an image is also compared in the other's tones
_WHITE = 0.9  # and up to which (an image clipped nearly whole leaves a few cells, which anything may match)
_CLIP_LEVEL = 0.97  # a pixel's luma from this share of its dtype's range up counts as clipped
_CELLS = np.arange(SIDE * SIDE, dtype=np.float32)
_PERCENTILES = (0.01 * (SIDE * SIDE - 1), 0.99 * (SIDE * SIDE - 1))  # where a sorted thumbnail's 1st and 99th are
_CLIP_SAMPLE = 128  # pixels of the shorter side the clipped share is counted on (every k-th pixel)


class Look(NamedTuple):
    """What `similarity` compares of an image (`look`); an audit keeps one per image it compares."""

    detail: np.ndarray  # float32 SIDE×SIDE: the lightly blurred thumbnail less its broad shading
    small: np.ndarray  # float32 SIDE×SIDE: the lightly blurred thumbnail (its tones and its cells' ranks, when asked)
    clipped: float  # the share of the image's pixels that are clipped (luma at the top of its range)


def look(img: np.ndarray) -> Look | None:
    """What `similarity` compares of an image: its SIDE×SIDE thumbnail, lightly blurred, as its detail and its
    tones, and how much of it is clipped; None for an image with too little detail to tell scenes apart (a flat
    wall, a smooth gradient)."""
    import cv2

    small = cv2.GaussianBlur(thumbnail(img, SIDE), (0, 0), _BLUR)
    detail = small - cv2.GaussianBlur(small, (0, 0), _BROAD)  # the layout's detail: what tells two scenes apart
    spread = float(detail.std())
    low, high = np.interp(_PERCENTILES, _CELLS, np.sort(small, axis=None))  # its 1st and 99th percentiles
    if spread < _FLAT or spread < _DETAIL * float(high - low):
        return None
    return Look(detail, small, _clipped(img))


def _ranks(small: np.ndarray) -> np.ndarray:
    """float32 SIDE*SIDE: each cell's rank among the thumbnail's (ties, such as cells clipped whole: their mean)."""
    flat = small.reshape(-1)
    order = np.argsort(flat, kind="stable")
    ranks = np.empty(flat.size, np.float32)
    ranks[order] = _CELLS
    tones = flat[order]
    if np.any(tones[1:] == tones[:-1]):
        _, tie, count = np.unique(flat, return_inverse=True, return_counts=True)
        ranks = (np.bincount(tie.reshape(-1), weights=ranks) / count)[tie.reshape(-1)].astype(np.float32)
    return ranks


def _clipped(img: np.ndarray) -> float:
    """The share of the image's pixels whose luma is `_CLIP_LEVEL` of its range or more, counted on every k-th row
    and column (from `_CLIP_SAMPLE` pixels of the shorter side)."""
    import cv2

    h, w = img.shape[:2]
    k = max(1, min(h, w) // _CLIP_SAMPLE)
    x = img
    if k > 1 and (x.ndim == 2 or x.shape[2] <= 4) and x.dtype in (np.uint8, np.uint16, np.float32):
        x = cv2.resize(np.ascontiguousarray(x), (w // k, h // k), interpolation=cv2.INTER_NEAREST)
    elif k > 1:
        x = x[::k, ::k]
    top = float(np.iinfo(img.dtype).max) if img.dtype.kind in "ui" else 1.0
    if x.ndim == 3 and x.shape[2] >= 3 and x.dtype in (np.uint8, np.uint16, np.float32):
        x = cv2.cvtColor(np.ascontiguousarray(x[..., :3]), cv2.COLOR_RGB2GRAY)
    elif x.ndim == 3:
        x = x.mean(axis=2)
    return float(np.count_nonzero(x >= _CLIP_LEVEL * top)) / max(1, x.size)


def similarity(a: Look | None, b: Look | None) -> float:
    """The best normalised correlation in [-1, 1] of two looks (`look`), over zooming either by `ZOOMS` and
    shifting it onto the other; where either has `CLIPPED` of its pixels clipped (up to `_WHITE`), the other is also
    compared in its tones (the better counts); 0 when either has too little detail (None)."""
    if a is None or b is None:
        return 0.0
    best = _aligned(a.detail, b.detail)
    if CLIPPED <= max(a.clipped, b.clipped) <= _WHITE:
        best = max(best, _aligned(_in_tones_of(a, b), b.detail) if b.clipped >= a.clipped else
                   _aligned(a.detail, _in_tones_of(b, a)))
    return best


def _in_tones_of(a: Look, b: Look) -> np.ndarray:
    """`a`'s detail with its thumbnail's values replaced by `b`'s of the same rank (histogram matching)."""
    import cv2

    small = np.interp(_ranks(a.small), _CELLS, np.sort(b.small, axis=None)).astype(np.float32).reshape(SIDE, SIDE)
    return small - cv2.GaussianBlur(small, (0, 0), _BROAD)


def _aligned(a: np.ndarray, b: np.ndarray) -> float:
    """The best correlation of two details over `ZOOMS` of either and shifts."""
    best = _aligned_correlation(a, b)
    if best < _HOPELESS:  # one scene cropped by a few percent correlates by 0.79 or more unzoomed
        return best
    for zoom in ZOOMS[1:]:
        for moving, fixed in ((a, b), (b, a)):
            best = max(best, _aligned_correlation(_zoomed(moving, zoom), fixed))
    return best


def _zoomed(img: np.ndarray, zoom: float) -> np.ndarray:
    import cv2

    if zoom == 1.0:
        return img
    c = (SIDE - 1) / 2
    m = np.float32([[zoom, 0, c * (1 - zoom)], [0, zoom, c * (1 - zoom)]])
    return cv2.warpAffine(img, m, (SIDE, SIDE), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)


def _aligned_correlation(moving: np.ndarray, fixed: np.ndarray) -> float:
    """The best normalised correlation of `moving`'s centre with `fixed` over shifts of up to _MARGIN pixels."""
    import cv2

    centre = moving[_MARGIN:-_MARGIN, _MARGIN:-_MARGIN]
    if float(centre.std()) < _FLAT or float(fixed.std()) < _FLAT:
        return 0.0
    return float(cv2.matchTemplate(fixed, centre, cv2.TM_CCOEFF_NORMED).max())
