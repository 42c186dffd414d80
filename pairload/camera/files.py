"""Camera raw files through LibRaw (rawpy): the Bayer mosaic packed SID-style into 4 half-resolution channels
(`read_mosaic`), the developed RGB target (`develop`, options in `DEVELOP`), and the exposures and amplification
ratio of a SID pair (`exposure_from_name`, `ratio`). numpy and rawpy only; rawpy is imported when first used."""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np

from ..errors import ConfigError, ImageError
from .libraw import (NOT_BAYER, NOT_BAYER_FIX, check_rows, header_colors, ifd_entries, opened, rawpy_module,
                     tiff_order)


# The target's development, SID's convention; a manifest records dict(DEVELOP) beside the LibRaw version. One change
# from SID's call: user_flip=0 keeps the pixels as the sensor lies (a camera's portrait tag would otherwise rotate
# the target away from its packed input).
DEVELOP = MappingProxyType({"use_camera_wb": True, "half_size": False, "no_auto_bright": True, "output_bps": 16,
                            "user_flip": 0})

PACKED_ORDER = "RGBG"  # the packed channels: R, the G on R's row, B, the G on B's row
SID_RATIO_CAP = 300.0
_SID_NAME = re.compile(r"(\d+)_(\d+)_(\d+(?:\.\d+)?)s(?:\.\w+)?")


@dataclass(frozen=True)
class Mosaic:
    """A Bayer mosaic packed into H/2×W/2×4 uint16 sensor counts (channels in PACKED_ORDER), with its levels.

    `black`: black level of each packed channel; `white`: saturation level; `pattern`: the 2×2 CFA at the top-left
    of the visible area ("RGGB", "BGGR", "GRBG" or "GBRG"); `camera`: "make model" (None where the container does
    not say it); `exposure`: seconds from the file's metadata (None if absent); `libraw`: LibRaw's version."""

    packed: np.ndarray
    black: tuple[int, int, int, int]
    white: int
    pattern: str
    camera: str | None
    exposure: float | None
    libraw: str

    def __post_init__(self):
        if self.packed.ndim != 3 or self.packed.shape[2] != 4 or self.packed.dtype != np.uint16:
            raise ImageError(f"Mosaic.packed: expected H×W×4 uint16, found {self.packed.shape} {self.packed.dtype}; "
                             "build it with read_mosaic")
        if len(self.black) != 4 or not all(0 <= b < self.white for b in self.black):
            raise ImageError(f"Mosaic: black levels {self.black} must be 4 values below the white level {self.white}; "
                             "the file's levels are inconsistent")
        if sorted(self.pattern) != sorted("RGGB"):
            raise ImageError(f"Mosaic.pattern {self.pattern!r}: expected a 2×2 Bayer pattern such as 'RGGB'")


def libraw() -> str:
    """LibRaw's version ("0.21.3"), as manifests record it beside the development options."""
    return ".".join(str(v) for v in rawpy_module().libraw_version)


@dataclass(frozen=True)
class RawInfo:
    """What LibRaw finds in a raw file's header (no pixel decoded): the visible area's (height, width), its 2×2 CFA
    pattern at the top-left, the camera ("make model", None where unknown) and the exposure in seconds (None)."""

    sensor_hw: tuple[int, int]
    pattern: str
    camera: str | None
    exposure: float | None

    @property
    def packed_hw(self) -> tuple[int, int]:
        """(height, width) of the packed mosaic: half the visible area, an odd last row or column left out."""
        return self.sensor_hw[0] // 2, self.sensor_hw[1] // 2


def probe(path: str | os.PathLike) -> RawInfo:
    """The `RawInfo` of a camera raw file, from its header (no pixel decoded): a file LibRaw cannot open, image data
    the header says is cut short or missing, or a sensor that is not 2×2 Bayer, is an ImageError naming it."""
    path = Path(path)
    with opened(path, unpack=False) as raw:
        found = header_colors(path)
        if found is None:  # LibRaw's C library out of reach: rawpy's own answers, at the cost of a decode
            raw.unpack()
            colors, shutter = _colors(raw), float(raw.other.shutter_speed)
        else:
            colors, shutter = found
        sites = _bayer_sites(raw, path, colors)
        pattern = "".join(PACKED_ORDER[sites.index((row, col))] for row in (0, 1) for col in (0, 1))
        hw = (int(raw.sizes.height), int(raw.sizes.width))
    if min(hw) < 2:
        raise ImageError(f"{path}: its visible area is {hw[1]}x{hw[0]} pixels, too small to hold a 2×2 Bayer cell")
    return RawInfo(sensor_hw=hw, pattern=pattern, camera=camera_name(path), exposure=_seconds(shutter))


def read_mosaic(path: str | os.PathLike) -> Mosaic:
    """The Bayer mosaic of a camera raw file, packed (R, G, B, G) at half resolution whatever the CFA's offset, with
    its black and white levels. A visible area of odd height or width loses its last row or column (a 2×2 cell
    cannot be split). X-Trans (6×6), Foveon, LinearRaw, sRAW and monochrome files, files LibRaw cannot decode and
    image data missing or cut short are refused with ImageError."""
    path = Path(path)
    version = libraw()
    with opened(path) as raw:
        sites = _bayer_sites(raw, path, _colors(raw))
        visible = raw.raw_image_visible
        check_rows(path, visible)
        height, width = visible.shape[0] // 2 * 2, visible.shape[1] // 2 * 2
        packed = np.empty((height // 2, width // 2, 4), np.uint16)
        for channel, (row, col) in enumerate(sites):
            packed[..., channel] = visible[row:height:2, col:width:2]
        per_color = raw.black_level_per_channel
        black = tuple(int(per_color[_color(raw, row, col)]) for row, col in sites)
        pattern = "".join(PACKED_ORDER[sites.index((row, col))] for row in (0, 1) for col in (0, 1))
        shutter = float(raw.other.shutter_speed)
        white = int(raw.white_level)
    return Mosaic(packed=packed, black=black, white=white, pattern=pattern, camera=camera_name(path),
                  exposure=_seconds(shutter), libraw=version)


def _color(raw, row: int, col: int) -> int:
    # raw_color counts from the full sensor, margins included; the sites are in the visible area
    sizes = raw.sizes
    return int(raw.raw_color(sizes.top_margin + row, sizes.left_margin + col))


def _colors(raw, side: int = 6) -> np.ndarray:
    """The colour index of each site of the visible area's top-left block, from an unpacked file (6: no CFA)."""
    if raw.raw_image is None or raw.raw_image.ndim != 2:
        return np.full((side, side), 6, np.int32)
    return np.array([[_color(raw, r, c) for c in range(side)] for r in range(side)], np.int32)


def _bayer_sites(raw, path: Path, colors: np.ndarray) -> list[tuple[int, int]]:
    """(row, col) in the visible area's first 2×2 cell of R, the G on R's row, B and the G on B's row; `colors`: the
    colour index of the top-left 6×6 sites."""
    desc = raw.color_desc.decode(errors="replace")
    if (colors >= len(desc)).any() or (colors < 0).any():
        raise ImageError(f"{path}: {NOT_BAYER}: LibRaw finds no colour filter array (colours {desc!r}, "
                         f"{raw.num_colors} a pixel); {NOT_BAYER_FIX}")
    if not (colors == np.tile(colors[:2, :2], (3, 3))).all():
        raise ImageError(f"{path}: {NOT_BAYER}: Fuji X-Trans (6×6 colour filter) is not supported yet (only 2×2 "
                         "Bayer sensors are); leave X-Trans files out")
    letters = {(row, col): desc[colors[row, col]] for row in (0, 1) for col in (0, 1)}
    found = "".join(letters[row, col] for row in (0, 1) for col in (0, 1))
    if sorted(found) != sorted("RGGB"):
        raise ImageError(f"{path}: {NOT_BAYER}: LibRaw reports colours {desc!r}, top-left cell {found!r}; "
                         f"{NOT_BAYER_FIX}")
    r_row, r_col = next(site for site, letter in letters.items() if letter == "R")
    # the diagonal of R is B; a 2×2 cell with R and B on a diagonal holds the two greens elsewhere
    b_site = (1 - r_row, 1 - r_col)
    if letters[b_site] != "B":
        raise ImageError(f"{path}: {NOT_BAYER}: top-left cell {found!r} has R and B side by side, not on a "
                         f"diagonal; {NOT_BAYER_FIX}")
    return [(r_row, r_col), (r_row, 1 - r_col), b_site, (1 - r_row, r_col)]


def _seconds(shutter: float) -> float | None:
    # LibRaw keeps the shutter time as a float32: 7 significant digits turn 0.03999999910593033 back into 0.04
    return float(f"{shutter:.7g}") if shutter > 0 else None


def develop(path: str | os.PathLike) -> np.ndarray:
    """The file developed by LibRaw with `DEVELOP` (camera white balance, no auto-brightness): H×W×3 uint16 RGB.
    Refused as `read_mosaic` refuses: a file that is not a whole Bayer mosaic is never developed into a target."""
    path = Path(path)
    with opened(path) as raw:
        _bayer_sites(raw, path, _colors(raw))
        check_rows(path, raw.raw_image_visible)
        rgb = raw.postprocess(**DEVELOP)
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint16:
        raise ImageError(f"{path}: LibRaw developed {rgb.shape} {rgb.dtype}, expected H×W×3 uint16; this file's "
                         "colour layout is not supported")
    return rgb


def sid_scene(name: str | os.PathLike) -> str | None:
    """The scene number of a SID file name or stem (`00001_03_0.1s.ARW` -> "00001"); None for a name of another
    form."""
    found = _SID_NAME.fullmatch(Path(name).name)
    return found.group(1) if found else None


def exposure_from_name(name: str | os.PathLike) -> float | None:
    """Seconds of exposure in a SID file name, `<scene>_<shot>_<seconds>s.<ext>` (`00001_00_0.04s.ARW` -> 0.04);
    None for a name of another form."""
    found = _SID_NAME.fullmatch(Path(name).name)
    return float(found.group(3)) if found else None


def ratio(input_s: float, target_s: float, cap: float = SID_RATIO_CAP) -> float:
    """The input's amplification ratio, SID's: target exposure / input exposure, at most `cap`."""
    for option, value in (("input_s", input_s), ("target_s", target_s), ("cap", cap)):
        if not value > 0:
            raise ConfigError.for_value(option, value, "expected a positive number of seconds (or ratio for cap)")
    return min(target_s / input_s, cap)


def camera_name(path: str | os.PathLike) -> str | None:
    """"Make Model" from a raw file's header: TIFF-based raws (ARW, NEF, CR2, DNG, ORF, RW2, PEF, …) by their first
    directory's Make and Model (DNG's UniqueCameraModel if they are absent), RAF by its header; None otherwise.
    rawpy does not expose LibRaw's make and model, hence this small reader."""
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    if head.startswith(b"FUJIFILMCCD-RAW"):
        return _ascii(head[0x1C:0x3C]) or None
    tags = _first_ifd_ascii(head)
    make, model = tags.get(271, ""), tags.get(272, "")
    if not model:
        return tags.get(50708) or make or None
    return model if not make or model.lower().startswith(make.lower()) else f"{make} {model}"


def _ascii(data: bytes) -> str:
    return data.split(b"\0", 1)[0].decode("ascii", errors="replace").strip()


def _first_ifd_ascii(head: bytes) -> dict[int, str]:
    """The ASCII tags of a classic TIFF header's first directory that lie within `head`; {} if it is not TIFF."""
    order = tiff_order(head)
    if order is None:
        return {}
    (offset,) = struct.unpack_from(order + "I", head, 4)
    if offset + 2 > len(head):
        return {}
    entries, _ = ifd_entries(head, order, offset)
    return {tag: _ascii(head[start:start + n]) for tag, kind, n, start in entries
            if kind == 2 and tag in (271, 272, 50708)}  # 2: ASCII
