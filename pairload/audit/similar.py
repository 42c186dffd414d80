"""Whether two images show the same scene, measured more finely than their fingerprints: small thumbnails, their
tone curves undone (`measures.thumbnail`), aligned over a few zooms (a crop of a few percent) and a translation
(phase correlation), then compared by normalised correlation. A fingerprint search finds the candidates; this
decides them."""

from __future__ import annotations

import numpy as np

from .measures import thumbnail

SIDE = 32  # pixels of a thumbnail's side
ZOOMS = (1.0, 1 / 0.96, 1 / 0.92, 1 / 0.88)  # what a crop of up to ~6% of each side looks like, zoomed back
_HOPELESS = 0.6  # an unzoomed correlation below this is no crop of one scene: the zooms are not tried
_MARGIN = 3  # thumbnail pixels left out at each border once aligned (content shifted in from outside)
_FLAT = 1e-3  # a thumbnail whose spread is below this shows nothing to compare (a flat image)
_DETAIL = 0.045  # the least spread of a look's detail, as a share of its range (a smooth gradient has less)
_BLUR = 1.0  # sigma, thumbnail pixels: what is compared is the layout of the scene, not its texture


def look(img: np.ndarray) -> np.ndarray | None:
    """What `similarity` compares of an image: its float32 SIDE×SIDE thumbnail, lightly blurred; None for an image
    with too little detail to tell scenes apart (a flat wall, a smooth gradient)."""
    import cv2

    small = cv2.GaussianBlur(thumbnail(img, SIDE), (0, 0), _BLUR)
    detail = small - cv2.GaussianBlur(small, (0, 0), 4.0)  # the layout's detail: what tells two scenes apart
    spread = float(detail.std())
    low, high = np.percentile(small, (1, 99))
    return detail if spread >= _FLAT and spread >= _DETAIL * float(high - low) else None


def similarity(a: np.ndarray | None, b: np.ndarray | None) -> float:
    """The best normalised correlation in [-1, 1] of two looks (`look`), over zooming either by `ZOOMS` and
    shifting it onto the other; 0 when either has too little detail (None)."""
    if a is None or b is None:
        return 0.0
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
