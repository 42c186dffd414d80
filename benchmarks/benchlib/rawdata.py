"""The raw benchmark's data: a SID-style tree of synthetic camera raw pairs (`write_sid_tree`: DNGs named as SID
names them, from `sid_mosaics`), its pairs (`sid_pairs`, `SidPair`), the pre-converted numpy copy users make of it
(`write_arrays`), and the DNG writer LibRaw reads bit-exactly (`write_dng`). numpy only; tifffile when writing."""

from __future__ import annotations

import os
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from pairload.errors import ConfigError, MissingDependencyError, PairingError
from pairload.format.atomic import atomic_open, write_json_atomic
from pairload.camera.files import develop, exposure_from_name, ratio, read_mosaic

CFA_CODES = {"R": 0, "G": 1, "B": 2}  # DNG's CFAPattern colour numbers (CFAPlaneColor 0, 1, 2)
CFA = 32803  # PhotometricInterpretation: colour filter array

# SID's Sony α7S II: its sensor, levels and exposures (short 0.1/0.04/0.033 s against a 10 s long: ratios 100,
# 250 and 300, the three SID trains on)
SONY_SIZE = (4256, 2848)  # width, height
SONY_BLACK, SONY_WHITE = 512, 16383
SHORT_S, LONG_S = (0.1, 0.04, 0.033), 10.0
NEUTRAL = (0.5, 1.0, 0.5)  # AsShotNeutral: the raw red and blue are half of green for a grey object
ARRAYS_INDEX = "index.json"


def _rational(value: float) -> tuple[int, int]:
    f = Fraction(value).limit_denominator(1_000_000)
    return f.numerator, f.denominator


def write_dng(path, mosaic: np.ndarray, pattern: str = "RGGB", *, black: int | tuple[int, ...] = SONY_BLACK,
              white: int = SONY_WHITE, exposure: float | None = None, neutral=NEUTRAL, make: str = "Pairload",
              model: str = "Synthetic CFA", fsync: bool = True) -> None:
    """Write `mosaic` (H×W uint16 sensor counts; LibRaw refuses sides under 22) as a DNG 1.4 CFA image, one
    uncompressed strip, atomically. `pattern`: the colour of each site row by row, 4 letters (2×2 Bayer) or 36
    (6×6, X-Trans-like); `black`: one level, or 4 (one per 2×2 site, row by row); `neutral`: AsShotNeutral
    (LibRaw's camera white balance is its inverse)."""
    try:
        import tifffile
    except ImportError:
        raise MissingDependencyError(f"{path}: writing DNG files needs tifffile, which is not installed; "
                                     "pip install tifffile") from None
    side = {4: 2, 36: 6}.get(len(pattern))
    if side is None or set(pattern) - set(CFA_CODES):
        raise ConfigError.for_value("pattern", pattern, "expected 4 (2×2 Bayer) or 36 (6×6) letters of R, G, B")
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
    with atomic_open(path, "wb", fsync=fsync) as fh:
        tifffile.imwrite(fh, mosaic, photometric=CFA, extratags=sorted(tags), metadata=None,
                         rowsperstrip=mosaic.shape[0], compression=None)


@dataclass(frozen=True)
class SidPair:
    """A short (input) and long (target) exposure of one scene, exposures in seconds from their SID names."""

    short: Path
    long: Path
    input_s: float
    target_s: float

    def __post_init__(self) -> None:
        if not (self.input_s > 0 and self.target_s > 0):
            raise PairingError(f"{self.short} / {self.long}: exposures {self.input_s} s and {self.target_s} s, "
                               "expected positive seconds; name the files <scene>_<shot>_<seconds>s.<ext>")

    @property
    def stem(self) -> str:
        """The pair's name: its short file's (SID has several shorts per long, never the other way round)."""
        return self.short.stem

    @property
    def ratio(self) -> float:
        return ratio(self.input_s, self.target_s)


def sid_name(scene: int, shot: int, seconds: float, ext: str = ".dng") -> str:
    """`00001_00_0.04s.dng`: SID's file name of a scene's shot."""
    return f"{scene:05d}_{shot:02d}_{seconds:g}s{ext}"


def sid_pairs(root: str | os.PathLike) -> list[SidPair]:
    """Every file of `root/short` with the one file of `root/long` of its scene (the name's first field), by name."""
    root = Path(root)
    sides = {}
    for side in ("short", "long"):
        folder = root / side
        if not folder.is_dir():
            raise PairingError(f"{folder}: no such folder; a SID-style tree holds short/ and long/ (write one with "
                               "write_sid_tree)")
        sides[side] = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    longs: dict[str, list[Path]] = {}
    for path in sides["long"]:
        longs.setdefault(path.name.split("_", 1)[0], []).append(path)
    pairs = []
    for short in sides["short"]:
        found = longs.get(short.name.split("_", 1)[0], [])
        if len(found) != 1:
            raise PairingError(f"{short}: expected one long exposure of its scene in {root / 'long'}, found "
                               f"{len(found)} ({', '.join(p.name for p in found) or 'none'}); keep one per scene")
        input_s, target_s = exposure_from_name(short), exposure_from_name(found[0])
        if input_s is None or target_s is None:
            raise PairingError(f"{short if input_s is None else found[0]}: no exposure in the name; name the files "
                               "<scene>_<shot>_<seconds>s.<ext> as SID does")
        pairs.append(SidPair(short, found[0], input_s, target_s))
    if not pairs:
        raise PairingError(f"{root / 'short'}: no files; write a tree with write_sid_tree")
    return pairs


def _sites(pattern: str) -> list[tuple[int, int, int]]:
    """(row, col, colour index) of each site of the 2×2 cell."""
    return [(r, c, "RGB".index(pattern[2 * r + c])) for r in (0, 1) for c in (0, 1)]


def sid_mosaics(index: int, height: int, width: int, *, seed: int = 0, input_s: float = SHORT_S[0],
                target_s: float = LONG_S, pattern: str = "RGGB", black: int = SONY_BLACK,
                white: int = SONY_WHITE) -> tuple[np.ndarray, np.ndarray]:
    """The (short, long) H×W uint16 mosaics of pair `index`: one smooth scene (waves and a highlight, per colour,
    seen through `NEUTRAL`) exposed `target_s` so that green averages about a fifth of the range (red and blue half
    that), and `input_s` to that over the true ratio, each with its own shot and read noise. The same for the same
    arguments."""
    rng = np.random.default_rng([seed, index])
    ys, xs = np.linspace(0, 1, height, dtype=np.float32), np.linspace(0, 1, width, dtype=np.float32)
    waves = rng.uniform(0.5, 3.0, (3, 2)).astype(np.float32)
    phases = rng.uniform(0, 2 * np.pi, (3, 2)).astype(np.float32)
    spot = rng.uniform(0.2, 0.8, 2).astype(np.float32)
    span = white - black
    long_signal = np.empty((height, width), np.float32)
    for row, col, k in _sites(pattern):
        y, x = ys[row::2], xs[col::2]
        # outer products keep a full-size scene cheap: a few 1-D curves, one multiply-add per sample
        scene = 0.45 + 0.3 * np.sin(2 * np.pi * waves[k, 0] * y + phases[k, 0])[:, None] * \
            np.cos(2 * np.pi * waves[k, 1] * x + phases[k, 1])[None, :]
        scene += 0.9 * np.exp(-((y - spot[0]) / 0.08) ** 2)[:, None] * np.exp(-((x - spot[1]) / 0.08) ** 2)[None, :]
        long_signal[row::2, col::2] = scene * (0.4 * span * NEUTRAL[k])
    gain, read = 0.5, 4.0  # DN per electron, read noise in DN: shot noise dominates the long, read noise the short

    def expose(signal: np.ndarray) -> np.ndarray:
        noise = rng.standard_normal(signal.shape, dtype=np.float32)
        noise *= np.sqrt(gain * signal + read * read)
        signal += noise + black
        return np.clip(np.rint(signal), 0, white).astype(np.uint16)

    short = expose(long_signal * np.float32(input_s / target_s))
    return short, expose(long_signal)


def write_sid_tree(root: str | os.PathLike, pairs: int, *, width: int = SONY_SIZE[0], height: int = SONY_SIZE[1],
                   seed: int = 0, pattern: str = "RGGB") -> list[SidPair]:
    """Write `pairs` scenes as SID names them: `short/00001_00_0.1s.dng` (0.1, 0.04, 0.033 s in turn) and
    `long/00001_00_10s.dng`, Sony's levels (black 512, white 16383), from `sid_mosaics`. Returns the pairs."""
    for option, value, least in (("pairs", pairs, 1), ("width", width, 22), ("height", height, 22)):
        if not isinstance(value, int) or value < least:
            raise ConfigError.for_value(option, value, f"expected a whole number of at least {least}")
    if width % 2 or height % 2:
        raise ConfigError.for_value("width" if width % 2 else "height", width if width % 2 else height,
                                    "expected an even number of sensor pixels (2×2 Bayer cells)")
    root = Path(root)
    out = []
    for i in range(pairs):
        scene, input_s = i + 1, SHORT_S[i % len(SHORT_S)]
        short, long = sid_mosaics(i, height, width, seed=seed, input_s=input_s, pattern=pattern)
        pair = SidPair(root / "short" / sid_name(scene, 0, input_s), root / "long" / sid_name(scene, 0, LONG_S),
                       input_s, LONG_S)
        for path, mosaic, seconds in ((pair.short, short, input_s), (pair.long, long, LONG_S)):
            path.parent.mkdir(parents=True, exist_ok=True)
            # fsync=False: benchmark data, written again from the seed if a crash loses it; the rename still
            # leaves no half-written file under a final name
            write_dng(path, mosaic, pattern, exposure=seconds, make="Sony", model="ILCE-7SM2", fsync=False)
        out.append(pair)
    return out


def write_arrays(root: str | os.PathLike, out: str | os.PathLike | None = None) -> Path:
    """The pre-converted copy users make for np.load: per pair `low/<stem>.npy` (the short's packed mosaic,
    H/2×W/2×4 uint16) and `high/<stem>.npy` (the long developed, H×W×3 uint16), and `index.json` (per stem: the
    long's name, the ratio, the packed channels' black levels, the white level). `out` defaults to `root/npy`."""
    pairs = sid_pairs(root)
    out = Path(out) if out is not None else Path(root) / "npy"
    for side in ("low", "high"):
        (out / side).mkdir(parents=True, exist_ok=True)
    index, developed = {}, {}
    for pair in pairs:
        mosaic = read_mosaic(pair.short)
        if pair.long not in developed:  # several shorts of a scene share its long
            developed = {pair.long: develop(pair.long)}
        for side, array in (("low", mosaic.packed), ("high", developed[pair.long])):
            with atomic_open(out / side / f"{pair.stem}.npy", "wb", fsync=False) as fh:
                np.save(fh, array)
        index[pair.stem] = {"long": pair.long.name, "ratio": pair.ratio, "black": list(mosaic.black),
                            "white": mosaic.white}
    write_json_atomic(out / ARRAYS_INDEX, index)
    return out
