"""The one gateway to LibRaw (rawpy): `opened` opens a camera raw file and turns every LibRaw failure inside its block
into a one-line ImageError naming the file; `header_colors` reads the CFA layout and exposure without decoding
pixels; `check_stored_data` and `check_rows` refuse image data that is missing or cut short. numpy, rawpy, ctypes."""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct
from pathlib import Path

import numpy as np

from ..errors import ImageError, MissingDependencyError

NOT_BAYER = "not a Bayer mosaic (LinearRaw / 3-channel / X-Trans / Foveon)"
NOT_BAYER_FIX = "export it to DNG with a Bayer CFA (not a linear or demosaiced DNG), or leave it out of the pack"
RECOPY = "re-copy the file from the camera or card, or remove it"
# a row with every sample zero: LibRaw pads what a cut-short or stripped file lacks with zeros; a dark frame
# (black level plus noise) never holds a whole row of zeros. A quarter of the rows is far beyond a dead row or two.
ZERO_ROWS_SHARE = 0.25


def rawpy_module():
    try:
        import rawpy
    except ImportError:
        raise MissingDependencyError("camera raw files need rawpy (LibRaw): pip install 'pairload[raw]'") from None
    return rawpy


def _said(exc: BaseException) -> str:
    arg = exc.args[0] if exc.args else exc
    text = arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg)
    return " ".join(text.split()) or type(exc).__name__


def refusal(path: Path, exc: BaseException) -> ImageError:
    """The ImageError for a failure rawpy raised while reading `path`: truncated, unsupported, or not a mosaic."""
    rawpy = rawpy_module()
    said = _said(exc)
    if isinstance(exc, (rawpy.LibRawIOError, rawpy.LibRawDataError, OSError, EOFError)):
        return ImageError(f"{path}: truncated or unreadable: LibRaw says '{said}'; {RECOPY}")
    if isinstance(exc, rawpy.LibRawFileUnsupportedError):
        return ImageError(f"{path}: LibRaw cannot read it as a camera raw file: unsupported by LibRaw "
                          f"{'.'.join(map(str, rawpy.libraw_version))} or not a raw file (LibRaw says '{said}'); "
                          "convert it to DNG with a Bayer CFA (Adobe DNG Converter), or remove it")
    if isinstance(exc, (RuntimeError, NotImplementedError)):  # rawpy's "RAW image is not flat", unknown filters
        return ImageError(f"{path}: {NOT_BAYER}: rawpy says '{said}'; {NOT_BAYER_FIX}")
    return ImageError(f"{path}: LibRaw cannot read it as a camera raw file (LibRaw says '{said}'); replace or "
                      "remove it")


@contextlib.contextmanager
def opened(path: Path, unpack: bool = True):
    """An open rawpy.RawPy for `path`, its pixels unpacked unless `unpack` is False; any LibRaw or rawpy failure in
    the block becomes `refusal`'s ImageError. LibRaw's buffers are freed on exit (a worker holds one file's)."""
    rawpy = rawpy_module()
    if not path.is_file():
        raise ImageError(f"{path}: no such file; check the path")
    if path.stat().st_size == 0:
        raise ImageError(f"{path}: file is empty (0 bytes); {RECOPY}")
    check_stored_data(path)
    raw = rawpy.RawPy()
    try:
        raw.open_file(os.fspath(path))
        if unpack:
            raw.unpack()
        yield raw
    except (rawpy.LibRawError, RuntimeError, NotImplementedError, OSError, EOFError) as exc:
        raise refusal(path, exc) from None
    finally:
        raw.close()


# ---------------------------------------------------------------------------------------------- header only
# rawpy reads the CFA layout (raw_pattern, raw_color) and the exposure (other) only after unpack(), which decodes
# the whole file (113 ms for a 12 MP file against 0.3 ms to open it), although LibRaw knows both once the file is
# open. sizes, color_desc and num_colors need no unpack. LibRaw's C API, in the library rawpy ships, answers COLOR
# and the exposure after open alone; where that library cannot be loaded, `header_colors` returns None and the
# caller unpacks (one decode more).

class _Imgother(ctypes.Structure):  # the head of libraw_imgother_t, the same in every LibRaw since 0.9
    _fields_ = [("iso_speed", ctypes.c_float), ("shutter", ctypes.c_float)]


_LIB: list = []


def _c_libraw():
    if not _LIB:
        lib = None
        here = Path(rawpy_module().__file__).parent
        candidates = sorted(p for d in (here, here.parent / "rawpy.libs", here / ".dylibs") if d.is_dir()
                            for p in d.iterdir() if p.name.startswith(("libraw_r", "raw_r", "libraw")))
        for candidate in candidates:
            try:
                lib = ctypes.CDLL(os.fspath(candidate))
                lib.libraw_init.restype = ctypes.c_void_p
                lib.libraw_init.argtypes = [ctypes.c_uint]
                lib.libraw_open_file.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
                lib.libraw_COLOR.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
                lib.libraw_get_imgother.restype = ctypes.POINTER(_Imgother)
                lib.libraw_get_imgother.argtypes = [ctypes.c_void_p]
                lib.libraw_close.argtypes = [ctypes.c_void_p]
                break
            except (OSError, AttributeError):
                lib = None
        _LIB.append(lib)
    return _LIB[0]


def header_colors(path: Path, side: int = 6) -> tuple[np.ndarray, float] | None:
    """LibRaw's colour index of each site of the visible area's top-left `side`×`side` block (6 for "no colour
    filter", Foveon or LinearRaw) and the exposure in seconds (0 if unknown), read after open without decoding;
    None where LibRaw's C library cannot be loaded."""
    lib = _c_libraw()
    if lib is None:
        return None
    handle = lib.libraw_init(0)
    if not handle:
        return None
    try:
        if lib.libraw_open_file(handle, os.fsencode(path)) != 0:
            return None  # rawpy opened it; let the caller's unpack say what is wrong
        colors = np.array([[lib.libraw_COLOR(handle, r, c) for c in range(side)] for r in range(side)], np.int32)
        return colors, float(lib.libraw_get_imgother(handle).contents.shutter)
    finally:
        lib.libraw_close(handle)


# --------------------------------------------------------------------------------------- image data present
_WIDTHS = {2: 1, 3: 2, 4: 4, 16: 8}  # TIFF field types read here (ASCII, SHORT, LONG, LONG8) → bytes per value
_FORMATS = {3: "H", 4: "I", 16: "Q"}


def tiff_order(data: bytes) -> str | None:
    """The struct byte order of a TIFF-based file's header ("<" or ">"), or None if `data` is not one."""
    return {b"II": "<", b"MM": ">"}.get(data[:2]) if len(data) >= 8 else None


def ifd_entries(data: bytes, order: str, offset: int) -> tuple[list[tuple[int, int, int, int]], int]:
    """The entries (tag, field type, count, where its values start) of the TIFF directory at `offset` whose type is
    read here and whose values lie within `data`, and the offset of the next directory (0: none, or beyond `data`)."""
    (count,) = struct.unpack_from(order + "H", data, offset)
    entries = []
    for i in range(count):
        at = offset + 2 + 12 * i
        if at + 12 > len(data):
            break
        tag, kind, n = struct.unpack_from(order + "HHI", data, at)
        width = _WIDTHS.get(kind)
        if width is None:
            continue
        start = at + 8 if n * width <= 4 else struct.unpack_from(order + "I", data, at + 8)[0]
        if start + n * width <= len(data):
            entries.append((tag, kind, n, start))
    at = offset + 2 + 12 * count
    return entries, struct.unpack_from(order + "I", data, at)[0] if at + 4 <= len(data) else 0


def _ifds(data: bytes):
    """(tags: {tag: values}) of every directory of a TIFF-based file reachable from its header and SubIFDs."""
    order = tiff_order(data)
    if order is None or struct.unpack_from(order + "H", data, 2)[0] != 42:
        return
    todo, seen = [struct.unpack_from(order + "I", data, 4)[0]], set()
    while todo and len(seen) < 64:
        offset = todo.pop()
        if offset < 8 or offset in seen or offset + 2 > len(data):  # 0 ends the chain
            continue
        seen.add(offset)
        entries, following = ifd_entries(data, order, offset)
        tags = {tag: struct.unpack_from(order + _FORMATS[kind] * n, data, start) for tag, kind, n, start in entries
                if kind in _FORMATS and n < 1 << 16
                and tag in (254, 256, 257, 258, 259, 273, 277, 279, 322, 323, 324, 325, 330)}
        todo.extend(tags.get(330, ()))
        todo.append(following)
        yield tags


def check_stored_data(path: Path) -> None:
    """Refuse a TIFF-based raw file (DNG, NEF, ARW, CR2, …) whose largest image's data runs past the end of the file
    (cut short) or whose uncompressed strips hold far fewer bytes than its size needs (data stripped). Reads the
    header only; other containers pass (their decode is checked by `check_rows`)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        data = f.read(1 << 18)
    best = None
    for tags in _ifds(data):
        offsets, counts = tags.get(273) or tags.get(324), tags.get(279) or tags.get(325)
        if not offsets or not counts or 256 not in tags or 257 not in tags:
            continue
        pixels = tags[256][0] * tags[257][0]
        if best is None or pixels > best[0]:
            best = (pixels, tags, offsets, counts)
    if best is None:
        return
    pixels, tags, offsets, counts = best
    end = max(o + c for o, c in zip(offsets, counts))
    if end > size:
        raise ImageError(f"{path}: truncated or unreadable: its header puts image data up to byte {end:,} but the "
                         f"file holds {size:,} bytes; {RECOPY}")
    bits = tags.get(258, (16,))[0] * tags.get(277, (1,))[0]
    need = pixels * bits // 8
    if tags.get(259, (1,))[0] == 1 and sum(counts) * 2 < need:  # uncompressed: the size is exact
        raise ImageError(f"{path}: image data missing or cut short: its {tags[256][0]}x{tags[257][0]} image of "
                         f"{bits} bits a pixel needs {need:,} bytes but its strips hold {sum(counts):,}; {RECOPY}")


def check_rows(path: Path, visible: np.ndarray) -> None:
    """Refuse a decoded mosaic that is constant (no sensor records a frame without noise: its data were stripped or
    overwritten) or has a quarter or more of its rows entirely zero (LibRaw's padding for data a cut or stripped file
    lacks)."""
    zero = ~visible.any(axis=1)
    count = int(zero.sum())
    if count and count >= ZERO_ROWS_SHARE * visible.shape[0]:
        first = int(np.argmax(zero))
        raise ImageError(f"{path}: image data missing or cut short: {count} of {visible.shape[0]} rows are zero "
                         f"(the first is row {first}); {RECOPY}")
    if visible.size and visible.min() == visible.max():
        raise ImageError(f"{path}: image data missing or overwritten: every value of its {visible.shape[1]}x"
                         f"{visible.shape[0]} mosaic is {int(visible.flat[0])}, and a sensor never records a frame "
                         f"without noise; {RECOPY}")
