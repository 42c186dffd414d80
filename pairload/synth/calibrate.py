"""A camera's noise profile fitted from its own frames (`calibrate`), as ELD's paper does it: flat-field frames give
the system gain K per ISO from the photon transfer curve, dark frames the colour bias, row noise and read noise (σ,
Tukey-λ shape and scale); across ISOs, the log-linear laws of read and row noise against K. Frames are camera raw
files (through pairload.raw.camera) or packed H×W×4 uint16 `.npy` mosaics. Numpy, and scipy for the Tukey-λ fit.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError, ImageError, MissingDependencyError
from ..raw.filetypes import NUMPY_EXTS, is_camera_raw
from .profiles import READ_DISTS, LogLinear, Profile

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
    if read_dist not in READ_DISTS:
        raise ConfigError.for_value("read_dist", read_dist, f"expected one of {', '.join(READ_DISTS)}")
    if not isinstance(window, int) or window < 8:
        raise ConfigError.for_value("window", window, "expected a side of at least 8 packed pixels")
    if iso is not None and (not isinstance(iso, int) or iso <= 0):
        raise ConfigError.for_value("iso", iso, "expected a positive whole ISO number")
    blacks = _levels(black)
    flat_frames = [read_frame(p, iso=iso, black=blacks, white=white, window=window, where=w)
                   for p, w in frame_paths(flats, "flats")]
    dark_frames = [read_frame(p, iso=iso, black=blacks, white=white, window=window, where=w)
                   for p, w in frame_paths(darks, "darks")]
    _same_camera(flat_frames + dark_frames)
    for f in flat_frames:
        check_saturation(f)
    by_iso = _by_iso(flat_frames, dark_frames)
    rows = []
    for value, (fl, dk) in sorted(by_iso.items()):
        dark = dark_noise(dk)
        rows.append({"iso": value, "flats": len(fl), "darks": len(dk), **dark,
                     **photon_transfer(fl, dk, dark)})
    report = {"camera": (flat_frames + dark_frames)[0].camera, "read_dist": read_dist, "isos": rows}
    profile = fit_profile(rows, name=name, read_dist=read_dist, camera=report["camera"],
                          white=_common([f.white for f in flat_frames + dark_frames]))
    report["read"] = _law_dict(profile.read)
    report["row"] = _law_dict(profile.row)
    return profile, report


def _levels(black) -> tuple[float, float, float, float] | None:
    if black is None:
        return None
    values = [black] * 4 if isinstance(black, (int, float)) else list(black)
    if len(values) != 4 or not all(isinstance(v, (int, float)) and v >= 0 for v in values):
        raise ConfigError.for_value("black", black, "expected one black level (DN >= 0) or 4, one per channel R, G, "
                                    "B, G")
    return tuple(float(v) for v in values)


def _law_dict(law: LogLinear) -> dict:
    return {"slope": law.slope, "bias": law.bias, "spread": law.spread}


# ------------------------------------------------------------------ reading frames

def frame_paths(items, role: str) -> list[tuple[Path, Path | None]]:
    """(file, the folder it was found under or None) of every frame in `items` (files, or folders searched
    recursively for camera raw and .npy files, hidden ones left out), in order."""
    if isinstance(items, (str, os.PathLike)):
        items = [items]
    out = []
    for item in items:
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
        from ..raw.camera import read_mosaic

        mosaic = read_mosaic(path)
        packed, levels, top = mosaic.packed, (tuple(map(float, mosaic.black)), float(mosaic.white)), mosaic.camera
        file_iso = _raw_iso(path)
    else:
        from ..raw.decode import decode_array

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
    from ..raw.libraw import opened

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
        raise ImageError(f"{other.path}: black level {other.black}, but {darks[0].path} has {darks[0].black}; the "
                         "dark frames of one ISO must share their levels")
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
    pixels' unequal sensitivity. Refuses too-dark flats (`check_saturation` the bright ones), and a curve that is no
    line."""
    dark_mean = np.asarray(dark["black"]) + np.asarray(dark["color_bias"])
    noise = math.sqrt(dark["read_sigma"] ** 2 + dark["row_sigma"] ** 2)
    signals = []
    for f in flats:
        signals.append(f.window.mean(axis=(0, 1)) - dark_mean)
        _check_bright(f, signals[-1], noise)
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
    return Profile(name=name, source=source, log_k=(float(log_k.min()), float(log_k.max())), read=read, row=row,
                   tukey_lambda=(min(lams), max(lams)) if read_dist == "tukey" else None, read_dist=read_dist,
                   color_bias=tuple(float(v) for v in np.mean([r["color_bias"] for r in rows], axis=0)),
                   white_level=white, black_level=black)


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
        raise ConfigError(f"--black {text}: expected a number of DN, or four separated by commas (R,G,B,G)") from None
    return levels[0] if len(levels) == 1 else levels


def save(profile: Profile, report: dict, path, report_path=None) -> None:
    """Write the fitted profile (and, if asked, the per-ISO report) atomically."""
    from ..format.atomic import write_json_atomic
    from .profiles import save_profile

    save_profile(profile, path)
    if report_path:
        write_json_atomic(report_path, report)
