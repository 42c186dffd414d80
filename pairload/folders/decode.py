"""Reading image files for packing: cheap header probes (`headers` for PNG, JPEG, BMP and PNM, Pillow for other
images, numpy's header reader for `.npy`, LibRaw for camera raw), exact decodes (OpenCV, its libraries kept off
stderr: `quiet_stderr`) into RGB uint8 or uint16, `.npy` arrays taken as they are, camera raw packed or developed
(`decode_camera`), and the hint for a pair whose sizes an EXIF rotation transposed. Policy, the same for both images
of a pair: gray replicated to RGB, alpha dropped, 16 bits kept (converted to 8 with rounding under `to_8bit`), EXIF
orientation ignored (pixels as stored)."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
from pathlib import Path

import numpy as np

from ..errors import ImageError
from .filetypes import NUMPY_EXTS, is_camera_raw
from .headers import ARRAY_CHANNELS, Header, read_header



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


def is_array(path: Path) -> bool:
    return path.suffix.lower() in NUMPY_EXTS


def probe_size(path: Path) -> tuple[int, int]:
    """(height, width) from the file header, without decoding pixels."""
    return probe(path).hw


def probe(path: Path) -> Header:
    """The file's `Header`, without decoding pixels; a file pack cannot store is an ImageError naming it. PNG, JPEG,
    BMP and PNM headers are read directly (`headers.read_header`); any other image, or one that reader passes on,
    is opened with Pillow (`probe_image`)."""
    if is_array(path):
        return probe_array(path)
    if is_camera_raw(path):
        from ..camera import files as camera

        info = camera.probe(path)
        return Header(*info.packed_hw, "uint16", 4, raw=info)
    header = read_header(path)
    if header is None:
        return probe_image(path)
    check_decodable_size(path, header.height, header.width)
    return header


def probe_image(path: Path) -> Header:
    """An image's `Header` as Pillow's `Image.open` reads it (no pixels decoded); a file it cannot open, or one too
    large to decode, is an ImageError naming it."""
    from PIL import Image, UnidentifiedImageError

    bits = 8
    try:
        if path.stat().st_size == 0:
            raise ImageError(f"{path}: file is empty (0 bytes); replace or remove it")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(path) as im:
                width, height = im.size
                bits = _bit_depth(im)
    except Image.DecompressionBombError:  # a large photo, not an attack: we only want its size
        height, width = _unchecked_header_size(path)
        bits = _png_bit_depth(path)
    except UnidentifiedImageError:
        raise ImageError(f"{path}: not a readable image (expected PNG, JPEG, BMP, TIFF or WebP); "
                         "replace or remove it") from None
    except OSError as exc:
        raise ImageError(f"{path}: cannot read the image header ({exc}); replace or remove it") from None
    check_decodable_size(path, height, width)
    return Header(height, width, "uint16" if bits > 8 else "uint8", 3)


def _bit_depth(im) -> int:
    """Bits per sample of an opened Pillow image: Pillow shows 16-bit RGB as mode RGB, so its header is asked (TIFF
    BitsPerSample), then how the tile is read (`RGB;16B`, `I;16`, a PNM maxval over 255)."""
    if im.mode.startswith("I;16"):
        return 16
    tags = getattr(im, "tag_v2", None)
    if tags is not None and tags.get(258):
        bps = tags.get(258)
        return max(bps) if isinstance(bps, tuple) else int(bps)
    for tile in im.tile or ():
        args = tile[3] if len(tile) > 3 else None
        args = args if isinstance(args, tuple) else (args,)
        if any(isinstance(a, str) and ";16" in a for a in args):
            return 16
        if im.format == "PPM" and len(args) > 1 and isinstance(args[1], int) and args[1] > 255:  # (mode, maxval)
            return 16
    return 8


def _png_bit_depth(path: Path) -> int:
    """A PNG's bit depth from its IHDR chunk (for a file too large for Pillow to open); 8 for any other file."""
    with open(path, "rb") as fh:
        head = fh.read(26)
    return head[24] if len(head) == 26 and head[:8] == b"\x89PNG\r\n\x1a\n" else 8


def probe_array(path: Path) -> Header:
    """The `Header` of a .npy image from its header alone (the array is not loaded); anything but an H×W×C array of
    uint8 or uint16 with 1 to 4 channels is refused naming what was found."""
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _fortran, dtype = read(fh)
    except OSError as exc:
        raise ImageError(f"{path}: cannot read ({exc.strerror or exc}); replace or remove it") from None
    except ValueError as exc:
        raise ImageError(f"{path}: not a readable .npy file ({_one_line(exc)}); replace or remove it") from None
    name = dtype.name if dtype.kind != "V" else str(dtype)
    if dtype.kind != "u" or dtype.itemsize not in (1, 2):
        raise ImageError(f"{path}: a .npy of {name} {tuple(shape)}; pack stores .npy images as they are and reads "
                         "uint8 or uint16 only: convert it (e.g. `(a * 255).round().astype(np.uint8)` for floats in "
                         "0..1, `a.astype(np.uint16)` for non-negative integers) and save it again")
    if len(shape) != 3 or shape[2] not in ARRAY_CHANNELS:
        fix = ("add the channel axis: `np.save(f, a[..., None])`" if len(shape) == 2 else
               "save one H×W×C image per file, channels last")
        raise ImageError(f"{path}: a .npy of shape {tuple(shape)}; pack reads H×W×C image arrays with 1 to 4 "
                         f"channels, channels last; {fix}")
    height, width = int(shape[0]), int(shape[1])
    if height < 1 or width < 1:
        raise ImageError(f"{path}: a .npy of shape {tuple(shape)} holds no pixels; replace or remove it")
    return Header(height, width, f"uint{8 * dtype.itemsize}", int(shape[2]))


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


RESIZE, CROP = "resize", "crop"  # how an image larger than --max-side is made to fit (`--fit`)
FITS = (RESIZE, CROP)


def target_size(height: int, width: int, resize: tuple[int, int] | None, max_side: int | None,
                fit: str = RESIZE) -> tuple[int, int]:
    """Stored (height, width) after the optional `--resize WxH` or `--max-side N`: shrunk keeping its aspect so that
    its longer side is N, or (`fit` CROP) its centre cut to at most N×N."""
    if resize is not None:
        return resize[1], resize[0]
    if max_side is not None and fit == CROP:
        return min(height, max_side), min(width, max_side)
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


class _QuietStderr:
    """File descriptor 2 pointed at the null device while a C decoder runs, as one context shared by the threads
    of a process (the first one in points it away, the last one out points it back). libpng, libtiff and OpenCV's
    logger write their errors and warnings straight to fd 2, where they would come before pack's one-line refusal,
    or litter a pack whose files all decode (libpng's iCCP warnings): the decoder's verdict is its return value,
    which is reported by name. What another thread writes to fd 2 meanwhile is dropped too (pack's other threads,
    hashing and uploading, write nothing there). Costs a few system calls per image, against milliseconds of
    decoding."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._saved: int | None = None

    def __enter__(self) -> None:
        with self._lock:
            if self._depth == 0:
                self._saved = self._point_away()
            self._depth += 1

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0 and self._saved is not None:
                os.dup2(self._saved, 2)
                os.close(self._saved)
                self._saved = None

    @staticmethod
    def _point_away() -> int | None:
        """fd 2's original, duplicated, after pointing fd 2 at the null device; None where fd 2 is not open."""
        with contextlib.suppress(AttributeError, ValueError, OSError):
            sys.stderr.flush()  # what Python holds for it is written where it was meant to go
        try:
            saved = os.dup(2)
        except OSError:
            return None
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
        return saved


quiet_stderr = _QuietStderr()


def decode_rgb(path: Path, *, to_8bit: bool, expect_hw: tuple[int, int] | None = None,
               out_hw: tuple[int, int] | None = None, fit: str = RESIZE,
               data: np.ndarray | None = None) -> tuple[np.ndarray, list[str]]:
    """Decode `path` into a C-order RGB H×W×3 array, uint8 or (a 16-bit file) uint16, uint8 under `to_8bit`;
    returns it and notes on what was converted. `data`: the file's bytes (uint8), where the caller has read them.

    Pixels are taken in the order they are stored (`cv2.IMREAD_UNCHANGED` ignores EXIF orientation), so a pair whose
    files disagree on orientation tags still lines up pixel for pixel."""
    import cv2

    notes: list[str] = []
    if data is None:
        data = read_bytes(path)
    if data.size == 0:
        raise ImageError(f"{path}: file is empty (0 bytes); replace or remove it")
    # the header size first (a cheap read when no probe gave it): an image too large to decode is refused by name
    check_decodable_size(path, *(expect_hw if expect_hw is not None else probe_size(path)))
    try:
        with quiet_stderr:
            img = cv2.imdecode(data, cv2.IMREAD_UNCHANGED)
    except cv2.error as exc:  # OpenCV 5 raises where 4 returned None (a limit, a damaged stream)
        raise ImageError(f"{path}: does not decode ({_one_line(exc)}); replace or remove it") from None
    if img is None:
        raise ImageError(f"{path}: does not decode (truncated or not an image); replace or remove it")
    if img.dtype == np.uint16 and to_8bit:
        img = to_uint8(img)
        notes.append("16bit")
    elif img.dtype not in (np.uint8, np.uint16):
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
    return fitted(img, out_hw, fit), notes


def to_uint8(img: np.ndarray) -> np.ndarray:
    """16-bit values to 8 bits, rounded to nearest (`--to-8bit`)."""
    return ((img.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)


def resized(img: np.ndarray, out_hw: tuple[int, int] | None) -> np.ndarray:
    """`img` (H×W×C) at `out_hw` (`--resize`, `--max-side`; area interpolation), C-order."""
    import cv2

    if out_hw is not None and img.shape[:2] != tuple(out_hw):
        channels = img.shape[2]
        img = cv2.resize(img, (out_hw[1], out_hw[0]), interpolation=cv2.INTER_AREA)
        img = img.reshape(out_hw[0], out_hw[1], channels)  # OpenCV drops a single channel's axis
    return np.ascontiguousarray(img)


def fitted(img: np.ndarray, out_hw: tuple[int, int] | None, fit: str = RESIZE) -> np.ndarray:
    """`img` (H×W×C) at `out_hw`: resized (`resized`), or with `fit` CROP its centre cut out (no pixel changes: a
    16-bit photo or a packed mosaic keeps its values), C-order."""
    if fit != CROP or out_hw is None or img.shape[:2] == tuple(out_hw):
        return resized(img, out_hw)
    (h, w), (height, width) = out_hw, img.shape[:2]
    top, left = (height - h) // 2, (width - w) // 2
    return np.ascontiguousarray(img[top:top + h, left:left + w])


def decode_array(path: Path, *, to_8bit: bool, expect: Header | None = None,
                 out_hw: tuple[int, int] | None = None, fit: str = RESIZE, bgr: bool = False
                 ) -> tuple[np.ndarray, list[str]]:
    """Load a .npy image as it is (channels as in the file, no RGB/BGR swap unless `bgr`), little-endian and C-order;
    uint16 becomes uint8 under `to_8bit`. `bgr`: the array's first three channels are blue, green, red (SDSD's and
    SMID's `.npy` frames, written by OpenCV) and are stored as red, green, blue (a fourth channel stays last); a
    one- or two-channel array is kept as it is. Returns it and notes on what was converted."""
    header = expect if expect is not None else probe_array(path)
    try:
        img = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ImageError(f"{path}: cannot load the array ({_one_line(exc)}); replace or remove it") from None
    if img.shape != (header.height, header.width, header.channels) or img.dtype.kind != "u" \
            or img.dtype.itemsize * 8 != int(header.dtype[4:]):
        raise ImageError(f"{path}: its header said {header.dtype} {header.hw + (header.channels,)} but it loads as "
                         f"{img.dtype} {img.shape}; the file changed while packing: run the pack again")
    img = img.astype(img.dtype.newbyteorder("<"), copy=False)
    if bgr and img.shape[2] >= 3:
        img = img[..., [2, 1, 0, *range(3, img.shape[2])]]  # a new C-order array
    notes = []
    if img.dtype == np.uint16 and to_8bit:
        img = to_uint8(img)
        notes.append("16bit")
    return fitted(img, out_hw, fit), notes


def read_bytes(path: Path) -> np.ndarray:
    """A file's bytes (uint8), or an ImageError naming it."""
    try:
        return np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        raise ImageError(f"{path}: cannot read ({exc})") from None


def decode(path: Path, *, to_8bit: bool, expect: Header | tuple[int, int] | None = None,
           out_hw: tuple[int, int] | None = None, fit: str = RESIZE, npy_bgr: bool = False,
           data: np.ndarray | None = None) -> tuple[np.ndarray, list[str]]:
    """The array pack stores from `path` (an image: `decode_rgb`; a .npy: `decode_array`, its colours swapped from
    BGR to RGB under `npy_bgr`) and its notes. `expect`: the file's probed `Header`, whose size and stored type the
    array must have (a bare (h, w): its size only); anything else is refused naming the file. `data`: an image
    file's bytes, where the caller has read them."""
    hw = expect.hw if isinstance(expect, Header) else expect
    if is_array(path):
        img, notes = decode_array(path, to_8bit=to_8bit, expect=expect if isinstance(expect, Header) else None,
                                  bgr=npy_bgr)
        if hw is not None and img.shape[:2] != tuple(hw):
            raise ImageError(f"{path}: its header said {hw[1]}x{hw[0]} but it loads as {img.shape[1]}x{img.shape[0]}; "
                             "the file changed while packing: run the pack again")
        return fitted(img, out_hw, fit), notes
    img, notes = decode_rgb(path, to_8bit=to_8bit, expect_hw=hw, out_hw=out_hw, fit=fit, data=data)
    if isinstance(expect, Header) and (img.dtype.name, img.shape[2]) != expect.stored(to_8bit):
        dtype, channels = expect.stored(to_8bit)
        raise ImageError(f"{path}: its header says {dtype} ×{channels} but it decodes to {img.dtype.name} "
                         f"×{img.shape[2]}; re-save the file")
    return img, notes


PACKED, DEVELOPED = "packed", "developed"  # how a camera raw file is stored (`decode_camera`)


def decode_camera(path: Path, expect: Header, as_: str) -> tuple[np.ndarray, tuple[int, ...] | None]:
    """A camera raw file as pack stores it: `packed` (the H/2×W/2×4 (R, G, B, G) mosaic in sensor counts) with its
    levels (black of each packed channel, then white), or `developed` by LibRaw (H×W×3 uint16, the size of the packed
    mosaic's 2×2 cells) with None. `expect`: its probed Header; a file that changed since is refused by name."""
    from ..camera import files as camera

    if as_ == PACKED:
        mosaic = camera.read_mosaic(path)
        img, levels = mosaic.packed, (*mosaic.black, mosaic.white)
        want = expect.hw
    else:
        img, levels = camera.develop(path), None
        want = (2 * expect.height, 2 * expect.width)
        img = np.ascontiguousarray(img[:want[0], :want[1]])  # an odd last row or column has no packed cell
    if img.shape[:2] != want:
        raise ImageError(f"{path}: its header said {expect.raw.sensor_hw[1]}x{expect.raw.sensor_hw[0]} sensor pixels "
                         f"but LibRaw gives {img.shape[1]}x{img.shape[0]} ({as_}); the file changed while packing, or "
                         "LibRaw crops it differently when developing: run the pack again, or leave the file out")
    return img, levels
