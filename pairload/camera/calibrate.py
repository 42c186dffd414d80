"""A camera's noise profile fitted from its own frames (`calibrate`), as ELD's paper does it: flat-field frames give
the system gain K per ISO from the photon transfer curve, dark frames the colour bias, row noise and read noise (σ,
Tukey-λ shape and scale); across ISOs, the log-linear laws of read and row noise against K. Frames are camera raw
files (through pairload.camera.files) or packed H×W×4 uint16 `.npy` mosaics. Numpy, and scipy for the Tukey-λ fit.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError, ImageError, MissingDependencyError
from ..format.atomic import write_json_atomic
from ..folders.filetypes import NUMPY_EXTS, is_camera_raw
from ..degrade.params import is_number
from ..degrade.profiles import (FILE_KEYS, K_BOUNDS, LAMBDA_EXPECTED, READ_DISTS, UINT16_TOP, Ceiling, LogLinear,
                                Profile, lambda_ok, save_profile, writing)
from ..plan.crops import is_whole

WINDOW = 512  # side of the central square analysed, in packed pixels (ELD and PMN take 800: statistics need less)
MIN_FRAMES = 2  # of each kind per ISO: differences of two frames are what cancel the fixed pattern
MIN_R2 = 0.9  # a photon transfer fit below this is no straight line: the flats are unusable
LEVEL_TOLERANCE = 0.05  # two flats are a pair when their mean signals differ by at most this fraction
SATURATED_FRACTION = 1e-3  # of a flat's pixels at the white level (or piled at its maximum): refused
DARK_FLAT = 10.0  # a flat whose signal is under this many dark-noise σ is too dark to be one
FULL = 0.8  # a flat above this fraction of (white - black) is near full well, where the response bends
TUKEY_SAMPLE = 65536  # residuals the Tukey-λ shape is fitted on (ppcc_max sorts them at every step)
ROW_FLOOR = 1e-3  # DN: a row noise too small to measure is stored as this (its log must exist)
_ISO_NAME = re.compile(r"(?:^|[^a-z])iso[-_ ]?(\d+)", re.I)


@dataclass(frozen=True, kw_only=True)
class Frame:
    """One frame's central window (h×w×4 uint16 packed R, G, B, G) with what its file says: ISO, levels (None where
    unknown), camera and the whole packed size."""

    path: Path
    window: np.ndarray
    iso: int
    black: tuple[float, float, float, float] | None
    white: float | None
    camera: str | None
    size: tuple[int, int]


def calibrate(flats, darks, *, name: str, iso: int | None = None, black=None, white: float | None = None,
              read_dist: str = "tukey", window: int = WINDOW) -> tuple[Profile, dict]:
    """The noise profile of a camera from its flat-field frames (`flats`: uniformly lit, unsaturated; per ISO two or
    more at each brightness) and dark frames (`darks`: lens capped, shortest exposure; two or more per ISO): files or
    folders (searched recursively) of camera raw files or H×W×4 uint16 `.npy` packed mosaics.

    ISO: a raw file's metadata, else `iso<N>` in the file's name or a folder's (`ISO800/`, `flat_iso800_01.npy`), else
    `iso`. Levels: a raw file's, else `black` (one number or 4) and `white`; without `black` the darks' mean (rounded)
    is the black level and the colour bias what rounding leaves. `window`: the central square analysed (packed pixels).
    Returns the profile (`read_dist` decides which read-noise fit it holds) and a report: per ISO K, photon-transfer
    r², read σ, Tukey-λ scale and shape, row σ, black level and colour bias, and the log-linear fits."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError.for_value("name", _given(name), "expected a non-empty profile name")
    if read_dist not in READ_DISTS:
        raise ConfigError.for_value("read_dist", read_dist, f"expected one of {', '.join(READ_DISTS)}")
    if not is_whole(window) or window < 8:
        raise ConfigError.for_value("window", _given(window), "expected a side of at least 8 packed pixels")
    if iso is not None and (not is_whole(iso) or iso <= 0):
        raise ConfigError.for_value("iso", _given(iso), "expected a positive whole ISO number")
    blacks = _levels(black)
    white = _white(white, blacks)
    flat_frames = [read_frame(p, iso=iso, black=blacks, white=white, window=window, where=w)
                   for p, w in frame_paths(flats, "flats")]
    dark_frames = [read_frame(p, iso=iso, black=blacks, white=white, window=window, where=w)
                   for p, w in frame_paths(darks, "darks")]
    _same_camera(flat_frames + dark_frames)
    check_roles(flat_frames, dark_frames, flats, darks)
    by_iso = _by_iso(flat_frames, dark_frames)
    rows = []
    for value, (fl, dk) in sorted(by_iso.items()):
        dark = dark_noise(dk)
        rows.append({"iso": value, "flats": len(fl), "darks": len(dk), **dark,
                     **photon_transfer(fl, dk, dark)})
        check_measured(rows[-1], fl, dk, read_dist)
    report = {"camera": (flat_frames + dark_frames)[0].camera, "read_dist": read_dist, "isos": rows}
    profile = fit_profile(rows, name=name, read_dist=read_dist, camera=report["camera"],
                          white=_common([f.white for f in flat_frames + dark_frames]))
    report["read"] = profile.read.to_dict()
    report["row"] = profile.row.to_dict()
    return profile, report


def _given(value):
    """An option's value as a refusal shows it: a string quoted (black='512' is no number)."""
    return repr(value) if isinstance(value, str) else value


def _levels(black) -> tuple[float, float, float, float] | None:
    if black is None:
        return None
    values = [black] * 4 if is_number(black) else list(black) if isinstance(black, (list, tuple)) else []
    if len(values) != 4 or not all(is_number(v) and 0 <= v < math.inf for v in values):
        raise ConfigError.for_value("black", _given(black), "expected one black level (DN >= 0) or 4, one per "
                                    "channel R, G, B, G")
    return tuple(float(v) for v in values)


def _white(white, blacks) -> float | None:
    """The white level given (None: not given), a number of DN above the black level and within 16 bits."""
    if white is None:
        return None
    if not is_number(white) or not 0 < white <= UINT16_TOP:
        raise ConfigError.for_value("white", _given(white), f"expected the white level (saturation) in DN, above 0 "
                                    f"and at most {UINT16_TOP}")
    if blacks is not None and max(blacks) >= white:
        raise ConfigError.for_value("white", white, f"expected a white level above the black level ("
                                    f"{max(blacks):g} DN)", fix="give the levels of these frames (white, black)",
                                    flag_fix="give the levels of these frames (--white, --black)")
    return float(white)


# ------------------------------------------------------------------ reading frames

def _listed(items, role: str = "") -> list:
    if isinstance(items, (str, os.PathLike)):
        return [items]
    listed = list(items) if isinstance(items, Iterable) and not isinstance(items, (bytes, dict)) else None
    if listed is None or not all(isinstance(i, (str, os.PathLike)) for i in listed):
        raise ConfigError.for_value(role, items if listed is None else listed, f"expected {role} frames: a path, or "
                                    "a list of paths of files or folders")
    return listed


def frame_paths(items, role: str) -> list[tuple[Path, Path | None]]:
    """(file, the folder it was found under or None) of every frame in `items` (files, or folders searched
    recursively for camera raw and .npy files, hidden ones left out), in order."""
    out = []
    for item in _listed(items, role):
        path = Path(item)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and _is_frame(p)
                           and not any(part.startswith(".") for part in p.relative_to(path).parts))
            if not found:
                raise ConfigError.for_value(role, path, "a folder with no camera raw or .npy file in it; give the "
                                            "folder of the frames")
            out += [(p, path) for p in found]
        elif path.is_file():
            if not _is_frame(path):
                raise ConfigError.for_value(role, path, "expected a camera raw file (.dng, .arw, .nef, .cr2, …) or "
                                            "a packed .npy mosaic")
            out.append((path, None))
        else:
            raise ConfigError.for_value(role, path, "no such file or folder; check the path")
    if not out:
        raise ConfigError.for_value(role, "[]", f"expected {role} frames: files or folders")
    return out


def _is_frame(path: Path) -> bool:
    return is_camera_raw(path) or path.suffix.lower() in NUMPY_EXTS


def read_frame(path: Path, *, iso: int | None = None, black=None, white: float | None = None, window: int = WINDOW,
               where: Path | None = None) -> Frame:
    """One frame's central window and facts (see `calibrate` for where ISO and levels come from)."""
    if is_camera_raw(path):
        from .files import read_mosaic

        mosaic = read_mosaic(path)
        packed, levels, top = mosaic.packed, (tuple(map(float, mosaic.black)), float(mosaic.white)), mosaic.camera
        file_iso = _raw_iso(path)
    else:
        from ..folders.decode import decode_array

        packed, _ = decode_array(path, to_8bit=False)
        if packed.shape[2] != 4 or packed.dtype != np.uint16:
            raise ImageError(f"{path}: a .npy of {packed.dtype} {packed.shape}; calibrate reads packed mosaics, "
                             "H×W×4 uint16 sensor counts in channel order R, G, B, G; pack the Bayer mosaic that way")
        levels, top, file_iso = (black, white), None, None
    found = file_iso or _iso_from_name(path, where) or iso
    if found is None:
        raise ConfigError(f"{path}: no ISO in its metadata or name", option="iso",
                          fix="put it in the name or folder (ISO800/, flat_iso800_01.npy), or give one for all "
                              "frames with iso=", flag_fix="put it in the name or folder (ISO800/, "
                              "flat_iso800_01.npy), or give one for all frames with {flag} N")
    height, width = packed.shape[:2]
    h, w = min(window, height), min(window, width)
    top_row, left = (height - h) // 2, (width - w) // 2
    view = np.ascontiguousarray(packed[top_row:top_row + h, left:left + w])
    return Frame(path=path, window=view, iso=int(found), black=levels[0], white=levels[1], camera=top,
                 size=(height, width))


def _raw_iso(path: Path) -> int | None:
    """The ISO LibRaw reads from a raw file's metadata; None where it has none (DNGs without an EXIF directory)."""
    from .libraw import opened

    with opened(path, unpack=False) as raw:
        value = float(raw.other.iso_speed)
    return int(round(value)) if value > 0 else None


def _iso_from_name(path: Path, where: Path | None) -> int | None:
    """`iso<N>` (iso800, ISO-800, ISO_800) in the file's name, else in the name of a folder from its own up to
    `where` (the folder it was found under; a file given itself: its own folder only), nearest first."""
    parts = [path.name]
    for parent in path.parents:
        parts.append(parent.name)
        if where is None or parent == where:
            break
    for part in parts:
        found = _ISO_NAME.search(part)
        if found and int(found.group(1)) > 0:
            return int(found.group(1))
    return None


def _same_camera(frames: list[Frame]) -> None:
    first = frames[0]
    for f in frames[1:]:
        if f.size != first.size:
            raise ImageError(f"{f.path}: a packed mosaic of {f.size[1]}x{f.size[0]}, but {first.path} is "
                             f"{first.size[1]}x{first.size[0]}; calibrate one camera (and one image size) at a time")
        if f.camera and first.camera and f.camera != first.camera:
            raise ImageError(f"{f.path}: shot with {f.camera!r}, but {first.path} with {first.camera!r}; calibrate "
                             "one camera at a time")


def _by_iso(flats: list[Frame], darks: list[Frame]) -> dict[int, tuple[list[Frame], list[Frame]]]:
    groups: dict[int, tuple[list[Frame], list[Frame]]] = {}
    for kind, frames in ((0, flats), (1, darks)):
        for f in frames:
            groups.setdefault(f.iso, ([], []))[kind].append(f)
    for value, (fl, dk) in sorted(groups.items()):
        for role, frames in (("flat", fl), ("dark", dk)):
            if len(frames) < MIN_FRAMES:
                shown = ", ".join(str(f.path) for f in (frames or fl + dk)[:2])
                raise ConfigError(f"ISO {value}: {len(frames)} {role} frame(s) ({shown}); calibrate needs at least "
                                  f"{MIN_FRAMES} flat and {MIN_FRAMES} dark frames per ISO (8 or more of each make "
                                  "a better fit)", fix=f"add {role} frames of ISO {value}, or leave that ISO out")
    return groups


def _common(values: list):
    """The one value every frame has, else None."""
    return values[0] if values and all(v == values[0] for v in values) else None


# ------------------------------------------------------------------ flats and darks told apart

def check_roles(flats: list[Frame], darks: list[Frame], flat_items, dark_items) -> None:
    """Refuse flats and darks given the wrong way round (darks brighter than the flats, or far above the black
    level), a frame given as both, and a lit frame among the darks, before the checks of one kind alone misname them
    (a dark frame passed as a flat looks saturated or too dark, a flat among the darks makes the read noise huge)."""
    both = sorted({f.path.resolve() for f in flats} & {f.path.resolve() for f in darks})
    if both:
        raise ConfigError(f"{both[0]}: given as a flat frame and as a dark frame ({len(both)} file(s) are among both); "
                          "give each frame once", option="darks", fix="lit frames as flats, lens-capped ones as darks",
                          flag_fix="lit frames with --flats, lens-capped ones with --darks")
    means = np.array([float(f.window.mean()) for f in darks])
    flat_level, dark_level = float(np.median([f.window.mean() for f in flats])), float(np.median(means))
    black = darks[0].black
    ceiling = Ceiling.of(darks[0].white, black)
    if dark_level > flat_level:
        why = f"mean {dark_level:.5g} DN"
    elif black is not None and dark_level - float(np.mean(black)) > ceiling.dn:
        why = (f"mean {dark_level:.5g} DN, {dark_level - float(np.mean(black)):.4g} DN above the black level, more "
               f"than {ceiling.levels}")
    else:
        _check_each_dark(darks, means)
        return

    def said(flats_as: str, darks_as: str, paths=_paths) -> str:
        return (f"the darks look like flats ({darks_as}{paths(dark_items)}: {why}; {flats_as}{paths(flat_items)}: "
                f"mean {flat_level:.5g} DN) — did you swap {flats_as.strip(' =')} and {darks_as.strip(' =')}?")

    raise ConfigError(said("flats=", "darks="), option="flats",
                      fix="give the lens-capped frames as darks and the lit ones as flats",
                      flag_problem=said("--flats ", "--darks ", lambda items: _brace(_paths(items))),
                      flag_fix="give the lens-capped frames as --darks and the lit ones as --flats")


def _check_each_dark(darks: list[Frame], means: np.ndarray) -> None:
    level = float(np.median(means))
    noise = float(np.median([f.window.std() for f in darks]))  # temporal, fixed-pattern and row noise: an upper bound
    for f, mean in zip(darks, means):
        if mean - level > DARK_FLAT * noise:
            raise ImageError(f"{f.path}: a dark frame {mean - level:.4g} DN brighter than the darks' median "
                             f"({level:.5g} DN), over {DARK_FLAT:g} times their noise ({noise:.3g} DN): a lit frame; "
                             "darks are shot with the lens capped at the shortest exposure: pass it as a flat if it "
                             "is one, or leave it out")


def _paths(items) -> str:
    return ", ".join(str(p) for p in _listed(items))


def _brace(text: str) -> str:
    """`text` as str.format leaves it (a ConfigError's flag_problem and flag_fix are formatted)."""
    return text.replace("{", "{{").replace("}", "}}")


def check_measured(row: dict, flats: list[Frame], darks: list[Frame], read_dist: str) -> None:
    """Refuse one ISO's measured numbers (`row`: K, read and row σ, Tukey-λ, colour bias) where no camera has them
    (the bounds `pairload.degrade.profiles.check_camera` keeps profile files to), naming the value and the frames."""
    ceiling = Ceiling.of(darks[0].white, row["black"])
    where = f"{darks[0].path} and the other {len(darks) - 1} dark frame(s) of ISO {row['iso']}"
    k_top = min(K_BOUNDS[1], ceiling.dn)
    if not K_BOUNDS[0] <= row["K"] <= k_top:
        raise ImageError(f"{flats[0].path} and the other {len(flats) - 1} flat frame(s) of ISO {row['iso']}: their "
                         f"photon transfer gives K {row['K']:.4g} DN per electron; a "
                         f"camera's is from {K_BOUNDS[0]:g} to {k_top:.4g} (at most {ceiling.levels}); check that the "
                         "flats are raw frames of a steady light and that the levels (white, black) are right")
    if read_dist == "tukey" and not lambda_ok(row["tukey_lambda"]):
        fix = "check them for light leaks and hot pixels, or fit a Gaussian read noise"
        raise ConfigError(f"{where}: their read noise fits a Tukey-λ shape of {row['tukey_lambda']:.3g}; "
                          f"{LAMBDA_EXPECTED}", option="read_dist", fix=f"{fix} (read_dist='gaussian')",
                          flag_fix=f"{fix} ({{flag}} gaussian)")
    for key, what in (("read_sigma", "read noise"), ("row_sigma", "row noise")):
        if row[key] > ceiling.dn:
            raise ImageError(f"{where}: their {what} σ is {row[key]:.4g} DN; a camera's is at most {ceiling.dn:.4g} "
                             f"DN, {ceiling.levels}; shoot darks with the lens capped at the shortest exposure, and "
                             "check the levels (white, black)")
    bias = max(row["color_bias"], key=abs)
    if abs(bias) > ceiling.dn:
        black = ", ".join(f"{v:g}" for v in row["black"])
        fix = "give the black level of these frames"
        raise ConfigError(f"{where}: their mean is {bias:.4g} DN from the black level ({black}); a camera's dark "
                          f"signal is within ±{ceiling.dn:.4g} DN of it, {ceiling.levels}", option="black",
                          fix=f"{fix} (black=), or shoot darks with the lens capped",
                          flag_fix=f"{fix} ({{flag}} N, or R,G,B,G), or shoot darks with the lens capped")


# ------------------------------------------------------------------ dark frames

def dark_noise(darks: list[Frame]) -> dict:
    """Black level, colour bias, row σ, read σ and the Tukey-λ fit of one ISO's dark frames (values in DN).

    Each frame minus the frames' mean (the fixed pattern, scaled back by n/(n-1)) leaves the temporal noise; the mean
    of each sensor row (R with the G of R's row, B with the G of B's row) is its row offset, whose variance less the
    read noise's share is the row variance; what is left after the row offsets is the read noise."""
    stack = np.stack([f.window for f in darks]).astype(np.float64)
    n, h, w = stack.shape[:3]
    mean = stack.mean(axis=(0, 1, 2))
    other = next((f for f in darks if f.black != darks[0].black), None)
    if other is not None:
        said = [f"{f.black}" if f.black is not None else "none (a .npy mosaic, no black= or --black given)"
                for f in (other, darks[0])]
        raise ImageError(f"{other.path}: black level {said[0]}, but {darks[0].path} has {said[1]}; the dark frames of "
                         "one ISO must share their levels (a raw file's are its own, .npy mosaics take black=, "
                         "--black): give the .npy frames the raw files' level, or calibrate them apart")
    black = darks[0].black
    black = np.round(mean) if black is None else np.asarray(black)
    stack -= stack.mean(axis=0)
    stack *= math.sqrt(n / (n - 1))
    cells = stack.reshape(n, h, w, 2, 2)  # the last two axes: sensor row (R's, B's), site within it
    rows = cells.mean(axis=(2, 4))
    cells -= rows[:, :, None, :, None]
    per_row = 2 * w  # samples in a sensor row of the window
    stack *= math.sqrt(per_row / (per_row - 1))  # the row mean taken out of them
    read_var = float(stack.var())
    row_var = float(np.mean(rows ** 2)) - read_var / per_row
    lam, scale = tukey_fit(stack.ravel())
    return {"black": [float(b) for b in black], "color_bias": [float(v) for v in mean - black],
            "read_sigma": math.sqrt(read_var), "read_scale": scale, "tukey_lambda": lam,
            "row_sigma": math.sqrt(max(row_var, 0.0))}


def tukey_fit(noise: np.ndarray) -> tuple[float, float]:
    """(λ, scale) of the Tukey-λ distribution that fits `noise` best, as ELD fits it: λ maximises the probability
    plot's correlation (scipy.stats.ppcc_max), the scale is that plot's slope. On a fixed subsample of the values."""
    try:
        from scipy import stats
    except ImportError:
        raise MissingDependencyError("calibrate fits the Tukey-λ read noise with scipy: pip install scipy") from None
    if noise.size > TUKEY_SAMPLE:
        noise = noise[np.random.default_rng(0).choice(noise.size, TUKEY_SAMPLE, replace=False)]
    lam = float(stats.ppcc_max(noise, dist="tukeylambda"))
    (_, _), (slope, _, _) = stats.probplot(noise, sparams=(lam,), dist="tukeylambda")
    return lam, float(slope)


# ------------------------------------------------------------------ flat frames

def photon_transfer(flats: list[Frame], darks: list[Frame], dark: dict) -> dict:
    """K of one ISO: the slope of the temporal variance against the mean signal (both DN) over pairs of flats at one
    brightness and pairs of darks; the variance of a pair's difference, halved, cancels the fixed pattern and the
    pixels' unequal sensitivity. Refuses too-dark flats, saturated ones (`check_saturation`), and a curve that is no
    line."""
    dark_mean = np.asarray(dark["black"]) + np.asarray(dark["color_bias"])
    noise = math.sqrt(dark["read_sigma"] ** 2 + dark["row_sigma"] ** 2)
    signals = []
    for f in flats:
        signals.append(f.window.mean(axis=(0, 1)) - dark_mean)
        _check_bright(f, signals[-1], noise)
        check_saturation(f)
    order = sorted(range(len(flats)), key=lambda i: float(np.mean(signals[i])))
    pairs, i = [], 0
    while i + 1 < len(order):
        a, b = float(np.mean(signals[order[i]])), float(np.mean(signals[order[i + 1]]))
        if b - a <= LEVEL_TOLERANCE * max(abs(a), abs(b)):
            pairs.append((flats[order[i]], flats[order[i + 1]]))
            i += 2
        else:
            i += 1
    if not pairs:
        raise ImageError(f"{flats[0].path}: no two flat frames of ISO {flats[0].iso} have the same brightness (within "
                         f"{LEVEL_TOLERANCE:.0%}); the gain is measured on pairs of frames shot alike: shoot two or "
                         "more flats at each exposure")
    points = [_pair_point(a, b, dark_mean) for a, b in pairs]
    points += [_pair_point(a, b, dark_mean) for a, b in zip(darks[0::2], darks[1::2])]
    x = np.concatenate([p[0] for p in points])
    y = np.concatenate([p[1] for p in points])
    slope, intercept = np.polyfit(x, y, 1)
    r2 = 1.0 - float(np.sum((y - (slope * x + intercept)) ** 2) / np.sum((y - y.mean()) ** 2))
    if not slope > 0 or r2 < MIN_R2:
        raise ImageError(f"{flats[0].path}: the photon transfer curve of ISO {flats[0].iso} is not an increasing line "
                         f"(slope {slope:.4g} DN/e-, r² {r2:.3f}, {len(pairs)} flat pair(s)); shoot flats of a "
                         "uniform, steady light at several exposures, none near black or saturation")
    levels = sorted(float(np.mean(p[0])) for p in points[:len(pairs)])
    return {"K": float(slope), "r2": r2, "intercept": float(intercept), "pairs": len(pairs),
            "levels": [round(v, 1) for v in levels]}


def _pair_point(a: Frame, b: Frame, dark_mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean signal, temporal variance) of each channel of two frames shot alike."""
    fa, fb = a.window.astype(np.float64), b.window.astype(np.float64)
    signal = (fa.mean(axis=(0, 1)) + fb.mean(axis=(0, 1))) / 2 - dark_mean
    return signal, (fa - fb).reshape(-1, 4).var(axis=0, ddof=1) / 2


def check_saturation(f: Frame) -> None:
    """Refuse a flat frame with pixels at its white level (or, with none known, piled on its maximum), or whose mean
    is near full well, where the response bends."""
    pixels = f.window.reshape(-1, 4)
    if f.white is not None:
        clipped = float(np.mean(pixels >= f.white))
        if f.black is not None:
            black = np.asarray(f.black)
            near = bool(np.any(pixels.mean(axis=0) - black > FULL * (f.white - black)))
        else:
            near = False
    else:  # no white level known: saturation shows as pixels piled up on the frame's maximum
        clipped = float(np.max(np.mean(pixels == pixels.max(axis=0), axis=0)))
        near = False
    if clipped > SATURATED_FRACTION or near:
        what = f"{clipped:.1%} of its pixels at saturation" if clipped > SATURATED_FRACTION else \
            f"a mean above {FULL:.0%} of the range"
        raise ImageError(f"{f.path}: a saturated flat frame ({what}); the gain needs flats below saturation: shorten "
                         "the exposure or dim the light, or leave the frame out")


def _check_bright(f: Frame, signal: np.ndarray, noise: float) -> None:
    if float(signal.max()) < DARK_FLAT * noise:
        raise ImageError(f"{f.path}: too dark for a flat frame (signal {float(signal.max()):.3g} DN above the darks, "
                         f"under {DARK_FLAT:g} times their noise, {noise:.3g} DN); lengthen the exposure, or pass it "
                         "as a dark frame if it is one")


# ------------------------------------------------------------------ across ISOs

def fit_profile(rows: list[dict], *, name: str, read_dist: str, camera: str | None, white) -> Profile:
    """The profile of per-ISO results `rows`: K's range over them, least squares of log σ on log K for the read and
    row noise (one ISO: slope 0), λ's range, colour bias averaged."""
    log_k = np.log([r["K"] for r in rows])
    read = _law(log_k, [r["read_scale" if read_dist == "tukey" else "read_sigma"] for r in rows])
    row = _law(log_k, [max(r["row_sigma"], ROW_FLOOR) for r in rows])
    lams = [r["tukey_lambda"] for r in rows]
    black = _common([tuple(r["black"]) for r in rows])
    isos = ", ".join(str(r["iso"]) for r in rows)
    source = (f"pairload calibrate: {sum(r['flats'] for r in rows)} flat and {sum(r['darks'] for r in rows)} dark "
              f"frames of {camera or 'one camera'}, ISO {isos}")
    try:
        return Profile(name=name, source=source, log_k=(float(log_k.min()), float(log_k.max())), read=read, row=row,
                       tukey_lambda=(min(lams), max(lams)) if read_dist == "tukey" else None, read_dist=read_dist,
                       color_bias=tuple(float(v) for v in np.mean([r["color_bias"] for r in rows], axis=0)),
                       white_level=white, black_level=black)
    except ConfigError as exc:  # each ISO passed `check_measured`: the fit across them is what no camera has
        raise ImageError(f"the frames of ISO {isos} give a profile no camera has: {exc.problem}; calibrate the ISOs "
                         "apart (the frames of each alone), or leave out the one whose numbers stand out") from None


def _law(log_k: np.ndarray, sigmas: list[float]) -> LogLinear:
    y = np.log(sigmas)
    if len(y) == 1 or np.ptp(log_k) < 0.05:  # one gain: no slope to fit
        return LogLinear(slope=0.0, bias=float(y.mean()), spread=float(y.std()))
    slope, bias = np.polyfit(log_k, y, 1)
    resid = y - (slope * log_k + bias)
    spread = math.sqrt(float(np.sum(resid ** 2)) / (len(y) - 2)) if len(y) > 2 else 0.0
    return LogLinear(slope=float(slope), bias=float(bias), spread=spread)


def report_lines(report: dict) -> list[str]:
    """The per-ISO table of a `calibrate` report, as text lines."""
    head = f"{'ISO':>6} {'K DN/e-':>9} {'r²':>6} {'read σ':>8} {'TL scale':>9} {'λ':>7} {'row σ':>7} {'flats':>5} " \
           f"{'darks':>5}"
    lines = [head]
    for r in report["isos"]:
        lines.append(f"{r['iso']:>6} {r['K']:>9.4g} {r['r2']:>6.3f} {r['read_sigma']:>8.4g} {r['read_scale']:>9.4g} "
                     f"{r['tukey_lambda']:>7.3f} {r['row_sigma']:>7.3g} {r['flats']:>5} {r['darks']:>5}")
    for key in ("read", "row"):
        law = report[key]
        sign = "-" if law["bias"] < 0 else "+"
        lines.append(f"{key}: log σ = {law['slope']:.4g} · log K {sign} {abs(law['bias']):.4g}, spread "
                     f"{law['spread']:.3g}")
    return lines


def black_option(text: str | None):
    """The CLI's --black: None, one level in DN, or four (R,G,B,G) separated by commas."""
    if text is None:
        return None
    try:
        levels = [float(v) for v in text.split(",")]
    except ValueError:
        levels = []
    if len(levels) not in (1, 4):
        raise ConfigError(f"--black {text}: expected a number of DN, or four separated by commas (R,G,B,G)")
    return levels[0] if len(levels) == 1 else levels


# ------------------------------------------------------------------ outputs

OUTPUTS = {"out": ("profile", "my-camera.json"), "report": ("report", "report.json")}  # option -> what, an example


def check_outputs(out, report=None) -> None:
    """Refuse, before a frame is read, an output path calibrate cannot write or must not replace: a folder, a path
    in a folder that does not exist or cannot be written, an existing file that is not what calibrate would write
    there (a profile, a report: those it replaces, as every pairload command replaces its own outputs), or one path
    for both."""
    if report is not None and os.path.realpath(report) == os.path.realpath(out):
        raise ConfigError.for_value("report", report, "the same path as the profile's; give the report its own file")
    for option, path in (("out", out), ("report", report)):
        if path is not None:
            _check_output(option, Path(path))


def _check_output(option: str, path: Path) -> None:
    what, example = OUTPUTS[option]

    def refuse(problem: str, fix: str) -> ConfigError:
        return ConfigError(f"{option}={path}: {problem}", option=option, fix=fix,
                           flag_problem=f"{{flag}} {_brace(f'{path}: {problem}')}", flag_fix=_brace(fix))

    folder = path.parent
    if path.is_dir():
        raise refuse(f"a folder; expected the path of the {what} JSON file to write", f"name a file in it, e.g. "
                     f"{path / example}")
    if folder.exists() and not folder.is_dir():
        raise refuse(f"{folder} is a file, not a folder; expected a file path in an existing folder",
                     f"write the {what} in a folder")
    if not folder.is_dir():
        raise refuse(f"the folder {folder} does not exist; expected a file path in an existing folder",
                     f"create the folder (mkdir -p {folder}) or write the {what} elsewhere")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise refuse(f"the folder {folder} cannot be written (permission denied or a read-only file system)",
                     f"write the {what} in a folder of yours")
    if os.path.lexists(path) and not _replaceable(path, option):
        raise refuse(f"an existing file that is not a {what} JSON file as calibrate writes; calibrate replaces only "
                     f"its own outputs", "give another path, or delete the file first if it is not needed")


def _replaceable(path: Path, option: str) -> bool:
    """Whether `path` holds what calibrate writes as `option`: a profile (a JSON object of a profile file's keys) or
    a report (one with the per-ISO numbers)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    if not isinstance(doc, dict):
        return False
    if option == "report":
        return isinstance(doc.get("isos"), list)
    return "read" in doc and set(doc) <= set(FILE_KEYS)


def save(profile: Profile, report: dict, out, report_out=None) -> None:
    """Write the fitted profile (and, if asked, the per-ISO report) atomically, after `check_outputs`; a failed
    write is an OutputError naming the path given, not the temporary file beside it."""
    check_outputs(out, report_out)
    save_profile(profile, out)
    if report_out is not None:
        with writing(report_out, "report"):
            write_json_atomic(report_out, report)
