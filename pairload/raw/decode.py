"""Reading image files for packing: cheap header probes (Pillow), exact decodes (OpenCV) into RGB uint8, and the
hint for a pair whose sizes an EXIF rotation transposed. Policy, the same for both images of a pair: gray replicated
to RGB, alpha dropped, 16-bit refused unless `to_8bit`, EXIF orientation ignored (pixels as stored)."""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path

import numpy as np

from ..errors import ImageError


def _cv2_limit(name: str, default: int) -> int:
    # OpenCV reads these variables once, when it is loaded, and aborts on a value that is not a plain number
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


# OpenCV's decoders refuse images beyond these (CV_IO_MAX_IMAGE_PIXELS, _WIDTH, _HEIGHT); pack checks the header
# against them first, so that such a file is refused by name instead of failing inside cv2.imdecode.
MAX_PIXELS = _cv2_limit("OPENCV_IO_MAX_IMAGE_PIXELS", 1 << 30)
MAX_WIDTH = _cv2_limit("OPENCV_IO_MAX_IMAGE_WIDTH", 1 << 20)
MAX_HEIGHT = _cv2_limit("OPENCV_IO_MAX_IMAGE_HEIGHT", 1 << 20)


def check_decodable_size(path: Path, height: int, width: int) -> None:
    """Raise ImageError naming `path` if OpenCV would refuse to decode an image of this size."""
    if height * width > MAX_PIXELS:
        why, var = f"OpenCV decodes at most {MAX_PIXELS:,} pixels", "OPENCV_IO_MAX_IMAGE_PIXELS"
    elif width > MAX_WIDTH:
        why, var = f"OpenCV decodes images at most {MAX_WIDTH:,} pixels wide", "OPENCV_IO_MAX_IMAGE_WIDTH"
    elif height > MAX_HEIGHT:
        why, var = f"OpenCV decodes images at most {MAX_HEIGHT:,} pixels high", "OPENCV_IO_MAX_IMAGE_HEIGHT"
    else:
        return
    raise ImageError(f"{path}: image is too large: its header says {width}x{height} ({height * width:,} pixels) and "
                     f"{why}; shrink or remove the file, or raise the limit by setting the environment variable {var} "
                     "to a larger number of pixels")


def probe_size(path: Path) -> tuple[int, int]:
    """(height, width) from the file header, without decoding pixels."""
    from PIL import Image, UnidentifiedImageError

    try:
        if path.stat().st_size == 0:
            raise ImageError(f"{path}: file is empty (0 bytes); replace or remove it")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(path) as im:
                width, height = im.size
    except Image.DecompressionBombError:  # a large photo, not an attack: we only want its size
        height, width = _unchecked_header_size(path)
    except UnidentifiedImageError:
        raise ImageError(f"{path}: not a readable image (expected PNG, JPEG, BMP, TIFF or WebP); "
                         "replace or remove it") from None
    except OSError as exc:
        raise ImageError(f"{path}: cannot read the image header ({exc}); replace or remove it") from None
    check_decodable_size(path, height, width)
    return height, width


_PIL_LIMIT = threading.Lock()


def _unchecked_header_size(path: Path) -> tuple[int, int]:
    """(height, width) from the header of an image beyond Pillow's decompression-bomb limit. Pillow has no per-call
    switch for that check, so its module limit is lifted for the header read only (opening reads no pixels)."""
    from PIL import Image

    with _PIL_LIMIT:
        saved, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with Image.open(path) as im:
                    width, height = im.size
        except OSError as exc:
            raise ImageError(f"{path}: cannot read the image header ({exc}); replace or remove it") from None
        finally:
            Image.MAX_IMAGE_PIXELS = saved
    return height, width


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200]


def target_size(height: int, width: int, resize: tuple[int, int] | None, max_side: int | None) -> tuple[int, int]:
    """Stored (height, width) after the optional `--resize WxH` or `--max-side N`."""
    if resize is not None:
        return resize[1], resize[0]
    if max_side is not None and max(height, width) > max_side:
        scale = max_side / max(height, width)
        return max(1, round(height * scale)), max(1, round(width * scale))
    return height, width


# EXIF Orientation values whose display rotation swaps width and height (transpose, 90° CW, transverse, 90° CCW)
_TRANSPOSING = {5: "transposed", 6: "rotated 90° clockwise", 7: "transversed", 8: "rotated 90° counter-clockwise"}
_EXIF_ORIENTATION = 0x0112


def exif_orientation(path: Path) -> int | None:
    """The EXIF Orientation tag of an image file (1-8), or None where it has none or cannot be read."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(path) as im:
                value = im.getexif().get(_EXIF_ORIENTATION)
    except Exception:  # a hint is never worth failing for: the refusal it adds to stands anyway
        return None
    return value if isinstance(value, int) else None


def orientation_hint(low: Path, high: Path, low_hw: tuple[int, int], high_hw: tuple[int, int]) -> str:
    """Why a pair's sizes differ when the cause is an EXIF rotation, for the size-mismatch refusal: its sizes are
    transposed (H×W against W×H) and one file carries an Orientation tag 5-8 that pack ignores. "" otherwise."""
    if tuple(low_hw) == tuple(high_hw) or tuple(low_hw) != tuple(high_hw)[::-1]:
        return ""
    for path in (low, high):
        tag = exif_orientation(path)
        if tag in _TRANSPOSING:
            return (f"{path} carries EXIF Orientation {tag} (to be shown {_TRANSPOSING[tag]}), which pack ignores: "
                    "pixels are packed as stored, so its width and height are swapped against its partner's; apply the "
                    "rotation to the pixels and re-save without the tag, e.g. "
                    "`ImageOps.exif_transpose(Image.open(f)).save(f)` in Pillow, `mogrify -auto-orient f` "
                    "(ImageMagick) or `exiftran -ai f` (JPEG)")
    return ""


def _is_gray_alpha_png(data: np.ndarray) -> bool:
    """Whether encoded bytes are a PNG whose header says gray+alpha (colour type 4), which OpenCV decodes as BGRA
    with B = G = R."""
    return data.size > 25 and bytes(data[:8]) == b"\x89PNG\r\n\x1a\n" and int(data[25]) == 4


def silence_cv2() -> None:
    """One OpenCV thread per process (pack runs one process per core) and no OpenCV log lines on stderr."""
    import cv2

    cv2.setNumThreads(1)
    try:
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)
    except AttributeError:  # older OpenCV builds without the logging module
        pass


def decode_rgb(path: Path, *, to_8bit: bool, expect_hw: tuple[int, int] | None = None,
               out_hw: tuple[int, int] | None = None) -> tuple[np.ndarray, list[str]]:
    """Decode `path` into a C-order RGB uint8 H×W×3 array; returns it and notes on what was converted.

    Pixels are taken in the order they are stored (`cv2.IMREAD_UNCHANGED` ignores EXIF orientation), so a pair whose
    files disagree on orientation tags still lines up pixel for pixel."""
    import cv2

    notes: list[str] = []
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        raise ImageError(f"{path}: cannot read ({exc})") from None
    if data.size == 0:
        raise ImageError(f"{path}: file is empty (0 bytes); replace or remove it")
    # the header size first (a cheap read when no probe gave it): an image too large to decode is refused by name
    check_decodable_size(path, *(expect_hw if expect_hw is not None else probe_size(path)))
    try:
        img = cv2.imdecode(data, cv2.IMREAD_UNCHANGED)
    except cv2.error as exc:  # OpenCV 5 raises where 4 returned None (a limit, a damaged stream)
        raise ImageError(f"{path}: does not decode ({_one_line(exc)}); replace or remove it") from None
    if img is None:
        raise ImageError(f"{path}: does not decode (truncated or not an image); replace or remove it")
    if img.dtype == np.uint16:
        if not to_8bit:
            raise ImageError(
                f"{path}: 16-bit image; pairload stores uint8 and will not drop precision silently "
                "(pass --to-8bit to convert with rounding)"
            )
        img = ((img.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)
        notes.append("16bit")
    elif img.dtype != np.uint8:
        raise ImageError(f"{path}: pixel type {img.dtype} is not supported (expected 8-bit or 16-bit integers)")
    if img.ndim == 2 or (img.ndim == 3 and img.shape[2] == 1):
        img = np.repeat(img.reshape(img.shape[0], img.shape[1], 1), 3, axis=2)
        notes.append("gray")
    elif img.ndim == 3 and img.shape[2] == 4:
        img = cv2.cvtColor(img, cv2.COLOR_BGRA2RGB)
        if _is_gray_alpha_png(data):  # reported as what it is: grayscale (replicated to RGB) with alpha (dropped)
            notes.append("gray")
        notes.append("alpha")
    elif img.ndim == 3 and img.shape[2] == 3:
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    else:
        raise ImageError(f"{path}: unsupported image layout {img.shape} (expected gray, RGB or RGBA)")
    if expect_hw is not None and img.shape[:2] != tuple(expect_hw):
        raise ImageError(f"{path}: header says {expect_hw[1]}x{expect_hw[0]} but it decodes to "
                         f"{img.shape[1]}x{img.shape[0]}; re-save the file")
    if out_hw is not None and img.shape[:2] != tuple(out_hw):
        img = cv2.resize(img, (out_hw[1], out_hw[0]), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(img), notes
