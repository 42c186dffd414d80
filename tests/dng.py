"""A minimal DNG writer for tests: a real CFA DNG (one uncompressed uint16 strip, written with tifffile) that LibRaw
reads bit-exactly, so camera raw decoding is tested on real files built in tmp_path, never committed ones."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import tifffile

CFA_CODES = {"R": 0, "G": 1, "B": 2}  # DNG's CFAPattern colour numbers (CFAPlaneColor 0, 1, 2)
CFA = 32803  # PhotometricInterpretation: colour filter array


def _rational(value: float) -> tuple[int, int]:
    f = Fraction(value).limit_denominator(1_000_000)
    return f.numerator, f.denominator


def write_dng(path, mosaic: np.ndarray, pattern: str = "RGGB", *, black: int | tuple[int, ...] = 512,
              white: int = 16383, exposure: float | None = None, neutral=(0.5, 1.0, 0.5),
              make: str = "Pairload", model: str = "Synthetic CFA") -> None:
    """Write `mosaic` (H×W uint16 sensor counts; LibRaw refuses sides under 22) as a DNG 1.4 CFA image. `pattern`:
    the colour of each site row by row, 4 letters (2×2 Bayer) or 36 (6×6, X-Trans-like); `black`: one level, or 4
    (one per 2×2 site, row by row); `neutral`: AsShotNeutral (LibRaw's camera white balance is its inverse)."""
    side = {4: 2, 36: 6}[len(pattern)]
    blacks = (black,) if isinstance(black, int) else tuple(black)
    tags = [
        (271, "s", 0, make, True),
        (272, "s", 0, model, True),
        (33421, "H", 2, (side, side), True),  # CFARepeatPatternDim
        (33422, "B", side * side, tuple(CFA_CODES[c] for c in pattern), True),  # CFAPattern
        (50706, "B", 4, (1, 4, 0, 0), True),  # DNGVersion
        (50707, "B", 4, (1, 1, 0, 0), True),  # DNGBackwardVersion
        (50708, "s", 0, f"{make} {model}", True),  # UniqueCameraModel
        (50710, "B", 3, (0, 1, 2), True),  # CFAPlaneColor
        (50711, "H", 1, 1, True),  # CFALayout: rectangular
        (50714, "I", len(blacks), blacks, True),  # BlackLevel
        (50717, "I", 1, white, True),  # WhiteLevel
        # ColorMatrix1 (XYZ to camera): identity, so colours stay predictable
        (50721, "2i", 9, sum((_rational(float(i == j)) for i in range(3) for j in range(3)), ()), True),
        (50728, "2I", 3, sum((_rational(n) for n in neutral), ()), True),  # AsShotNeutral
    ]
    if len(blacks) == 4:
        tags.append((50713, "H", 2, (2, 2), True))  # BlackLevelRepeatDim
    if exposure is not None:
        tags.append((33434, "2I", 1, _rational(exposure), True))  # ExposureTime
    mosaic = np.ascontiguousarray(mosaic, dtype=np.uint16)
    tifffile.imwrite(path, mosaic, photometric=CFA, extratags=sorted(tags), metadata=None,
                     rowsperstrip=mosaic.shape[0], compression=None)
