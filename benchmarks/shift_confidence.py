#!/usr/bin/env python3
"""How far to trust pack's shift estimates (`pairload.audit.measures.shift_between`), the evidence behind
`audit.packing.CONFIDENT`: 216 low-light pairs of 18 real photographs (scikit-image's, 600x400 crops), the input
darkened 7-30x (a third of them under a 2.2 tone curve) with noise of sigma 1-4, a third unshifted and the others
moved by up to 5 px in each direction (sub-pixel, bicubic). Prints how many estimates are confident, the largest
error among them, and the highest confidence of any estimate off by more than half a pixel.

    python benchmarks/shift_confidence.py

Needs scikit-image; no GPU; a few seconds.
"""

from __future__ import annotations

import sys
from pathlib import Path

import cv2
import numpy as np

from pairload.audit.measures import shift_between
from pairload.audit.packing import CONFIDENT

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lossless_probe import photos  # noqa: E402


def main() -> dict:
    rng = np.random.default_rng(7)
    rows = []
    for high in (h for _, h in photos(18)):
        for trial in range(12):
            dy, dx = rng.uniform(-5, 5, 2) * (trial % 3 != 0)
            moved = cv2.warpAffine(high.astype(np.float32), np.float32([[1, 0, dx], [0, 1, dy]]),
                                   high.shape[1::-1], flags=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REFLECT)
            gamma = rng.choice([1.0, 1.0, 2.2])
            x = (np.clip(moved, 0, 255) / 255) ** gamma * 255 / rng.uniform(7, 30)
            low = np.clip(np.round(x + rng.normal(0, rng.uniform(1, 4), x.shape)), 0, 255).astype(np.uint8)
            ey, ex, confidence = shift_between(low, high)  # the target is the input moved back by (dy, dx)
            rows.append((confidence, max(abs(ey + dy), abs(ex + dx))))
    confidence, error = np.array(rows).T
    sure = confidence >= CONFIDENT
    report = {"pairs": len(rows), "confident": int(sure.sum()),
              "largest_error_confident_px": round(float(error[sure].max()), 3),
              "highest_confidence_off_by_half_a_pixel": round(float(confidence[error > 0.5].max()), 3)
              if (error > 0.5).any() else None}
    print(report)
    return report


if __name__ == "__main__":
    main()
