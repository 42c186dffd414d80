"""Reading image files for packing: cheap header probes (Pillow) and exact decodes (OpenCV) into RGB uint8.

Policy, identical for both images of a pair: grayscale is replicated to 3 channels, alpha is dropped,
16-bit images are refused unless `to_8bit`, and EXIF orientation is ignored (pixels are kept in the order
they are stored in the file, as `cv2.IMREAD_UNCHANGED` reads them), so a pair whose files disagree on
orientation tags still lines up pixel for pixel.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from ..errors import ImageError


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
    except Image.DecompressionBombError:  # a large photo, not an attack: we only want its size, cv2 decodes it
        return _decoded_size(path)
    except UnidentifiedImageError:
        raise ImageError(f"{path}: not a readable image (expected PNG, JPEG, BMP, TIFF or WebP); replace or remove it") from None
    except OSError as exc:
        raise ImageError(f"{path}: cannot read the image header ({exc}); replace or remove it") from None
    return height, width


def _decoded_size(path: Path) -> tuple[int, int]:
    import cv2

    img = cv2.imdecode(np.fromfile(path, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
    if img is None:
        raise ImageError(f"{path}: does not decode (truncated, not an image, or larger than OpenCV accepts); replace "
                         "or remove it")
    return int(img.shape[0]), int(img.shape[1])


def target_size(height: int, width: int, resize: tuple[int, int] | None, max_side: int | None) -> tuple[int, int]:
    """Stored (height, width) after the optional `--resize WxH` or `--max-side N`."""
    if resize is not None:
        return resize[1], resize[0]
    if max_side is not None and max(height, width) > max_side:
        scale = max_side / max(height, width)
        return max(1, round(height * scale)), max(1, round(width * scale))
    return height, width


def _silence_cv2() -> None:
    import cv2

    cv2.setNumThreads(1)
    try:
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)
    except AttributeError:  # older OpenCV builds without the logging module
        pass


def decode_rgb(path: Path, *, to_8bit: bool, expect_hw: tuple[int, int] | None = None,
               out_hw: tuple[int, int] | None = None) -> tuple[np.ndarray, list[str]]:
    """Decode `path` into a C-order RGB uint8 H×W×3 array; returns it and notes on what was converted."""
    import cv2

    notes: list[str] = []
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        raise ImageError(f"{path}: cannot read ({exc})") from None
    if data.size == 0:
        raise ImageError(f"{path}: file is empty (0 bytes); replace or remove it")
    img = cv2.imdecode(data, cv2.IMREAD_UNCHANGED)
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
